"""Rich tables for plans and rollout state, shared by `plan`, `status`, `submit --follow` and the demo.

Every cell and title is a `Text`, so a service, reason or audit entry is shown as written and never read as
rich markup (a reason containing "[/red]" would otherwise raise MarkupError). Text that people or the outside
world wrote goes through `shown` (rich) or `echo` (plain lines): control characters and escape sequences are
printed as escapes (\\x1b, \\n), so no name or reason can move the cursor, recolour the terminal or print a
line of its own.
"""

from __future__ import annotations

import os
from typing import TextIO

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from common.text import terminal
from workflows.plan import Plan
from workflows.request import RolloutRequest
from workflows.rollout.details import rollout_summary
from workflows.rollout.models import RolloutState
from workflows.stage.models import StageState

STYLE = {
    "succeeded": "green", "skipped": "green", "rolled_back": "yellow", "failed": "bold red",
    "rolling_back": "yellow", "soaking": "cyan", "analyzing": "cyan", "deploying": "cyan", "promoting": "cyan",
    "pending": "dim", "evacuating": "yellow", "restoring_traffic": "yellow", "aborted": "yellow", "rejected": "yellow",
    "paused": "magenta", "queued": "dim",
    "awaiting_approval": "magenta", "waiting_window": "magenta", "waiting_traffic": "magenta", "held": "magenta", "running": "cyan",
}


PIPE_WIDTH = 200  # lines into a pipe or a CI log, which has no width of its own (rich would assume 80)


def console_width(stream: TextIO) -> int | None:
    """The width to print at: the terminal's (None: rich reads it, or $COLUMNS), else PIPE_WIDTH, so that a pipe or
    a CI log gets whole ids and notes instead of tables squeezed into 80 columns ('ap-south-1/t…')."""
    if os.environ.get("COLUMNS") or stream.isatty():
        return None
    return PIPE_WIDTH


def shown(text: str, style: str = "") -> Text:
    """User-supplied text for a rich console: one line, control characters escaped, never markup."""
    return Text(terminal(text), style=style)


def echo(text: str, *, err: bool = False) -> None:
    """Print one line that may hold user-supplied text, control characters escaped."""
    click.echo(terminal(text), err=err)


def styled(status: str) -> Text:
    return Text(status.replace("_", " "), style=STYLE.get(status, ""))


def duration(hours: float) -> str:
    """3600 s -> '1 h', 0.002 h -> '7 s'."""
    seconds = hours * 3600
    if seconds == 0:
        return "none"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{hours:g} h"


def on_failure(req: RolloutRequest, region: str, environment: str) -> str:
    """What a failing stage does: 'roll back', or evacuate its traffic in steps, roll back, and restore it."""
    r = next((r for r in req.regions if r.name == region), None)
    if r is None or environment != "prod" or r.on_failure != "evacuate":
        return "roll back"
    levels = "→".join(f"{level}%" for level in req.evacuation.steps)
    return f"evacuate ({levels}), roll back, restore"


def plan_table(req: RolloutRequest, plan: Plan) -> Table:
    """One row per stage, grouped by wave, with the production traffic each wave touches; a stage that evacuates
    its traffic when it fails says so on a line of its own (every other stage just rolls back)."""
    t = Table(title=Text(f"Plan: {req.service} {req.version} ({len(plan.waves)} waves)"), title_justify="left")
    for col in ("wave", "kind", "stage", "traffic", "soak", "gate"):
        if col == "stage":  # it also carries each stage's notes (canary steps, on failure): they wrap, a key folds
            t.add_column(col, overflow="fold")
        else:
            t.add_column(col, no_wrap=True)
    gates = {g.key for g in req.approvals.gates}
    for w in plan.waves:
        for i, s in enumerate(w.stages):
            gate = "approval" if s.key in gates or (i == 0 and f"wave-{w.index}" in gates) else ""
            t.add_row(
                Text(str(w.index) if i == 0 else ""),
                Text(w.kind if i == 0 else ""),
                Text(s.key + (" (canary region)" if w.kind == "prod" and s.region == plan.canary_region else "")),
                Text(f"{s.traffic_share:.0%}" if s.environment == "prod" else "-"),
                Text(duration(req.soak.hours(s.environment))),
                Text(gate),
            )
            if req.canary.traffic is not None:
                t.add_row("", "", Text(f"canary steps {req.canary.traffic.line()}", style="cyan"), "", "", "")
            if (what := on_failure(req, s.region, s.environment)) != "roll back":
                t.add_row("", "", Text(f"on failure: {what}", style="yellow"), "", "", "")
        if w.kind == "prod":
            t.add_row("", "", Text(f"wave touches {w.traffic_share:.0%} of production", style="dim"), "", "", "")
    return t


def state_table(state: RolloutState) -> Table:
    """Per-stage status, versions and verdicts of a rollout; its title and caption are the rollout's own summary."""
    summary = rollout_summary(state)
    title = Text.assemble(f"{summary.rollout}: ", styled(summary.status))
    caption = shown(f"waiting for {summary.waiting_for}") if summary.waiting_for else None
    t = Table(title=title, title_justify="left", caption=caption)
    for col in ("wave", "stage", "status", "before", "now", "verdict"):
        t.add_column(col, no_wrap=True)  # a stage key stays whole: the note column gives way
    t.add_column("note", overflow="fold", ratio=1)
    for s in state.stages:
        verdict = f"{s.verdict} {s.score:g}" if s.verdict and s.score is not None else (s.verdict or "")
        t.add_row(Text(str(s.wave)), Text(s.key), styled(s.status), Text(s.version_before or "?"), Text(s.version_now or "?"),
                  Text(verdict), shown(_note(s)))
    return t


def _note(s: StageState) -> str:
    """The stage's reason, after its weighted canary's step and weights while they matter."""
    if not s.canary_steps:
        return s.reason[:90]
    gone = " (withdrawn)" if s.withdrawn_at is not None else ""
    return f"step {s.canary_step}/{s.canary_steps}: {s.canary_weights}{gone}" + (f"; {s.reason[:90]}" if s.reason else "")


def print_status(state: RolloutState, rollout_id: str, console: Console) -> None:
    """`bifrost status`: the stage table, pending approvals and the audit trail, one escaped line per entry."""
    console.print(state_table(state))
    if state.pending_approvals:
        console.print(shown(f"pending approvals: {', '.join(state.pending_approvals)} — "
                            f"bifrost approve {rollout_id} --stage <stage> | --wave <n>"))
    if state.audit:
        console.print(Text("audit trail:"))
        for a in state.audit:
            console.print(shown(f"  {a.at:%Y-%m-%d %H:%M:%S} {a.who}: {a.action} {a.target or ''} {a.detail}"))
