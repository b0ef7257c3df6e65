"""Markdown for the Temporal UI's Current Details, and the one-line summary: pure functions of a state.

The rollout's page is a dashboard — waves and stages (status, before → now, verdict and score, soak look
N/M and its end), what the rollout waits for and what an approval releases, the pause (who, why, where it
holds), how to act, and the last audit lines. A stage's page says where the stage is, which versions, its
verdict and report, and whether the rollout may still roll it back.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from temporalio.common import SearchAttributeUpdate

from common.text import markdown as md
from common.text import ratio
from common.types import TERMINAL
from workflows import search
from workflows.controls import find_hold
from workflows.controls.details import AUDIT_LINES, WHO, audit_line
from workflows.controls.details import row as _row
from workflows.controls.details import when as _when
from workflows.plan import Plan
from workflows.rollout.models import RolloutState, RolloutSummary
from workflows.stage.details import soak_cell, status_cell, verdict_cell, versions_cell


def stage_table(state: RolloutState) -> str:
    rows = [_row(["wave", "stage", "status", "version", "verdict", "soak"]), "|---|---|---|---|---|---|"]
    for st in state.stages:
        mark = "**" if st.key in state.current_stages and not state.finished else ""
        rows.append(_row([str(st.wave), f"{mark}{st.key}{mark}", md(status_cell(st)), versions_cell(st),
                          verdict_cell(st), soak_cell(st)]))
    return "\n".join(rows)


def approval_releases(plan: Plan, wave: int) -> str:
    """'wave 4 releases eu-west-1/prod + us-east-1/prod, 85% of production traffic' (what approving it does)."""
    w = next((w for w in plan.waves if w.index == wave), None)
    if w is None:
        return f"wave {wave} goes on"
    keys = " + ".join(s.key for s in w.stages)
    traffic = f", {w.traffic_share:.0%} of production traffic" if w.kind == "prod" else " (test)"
    return f"wave {wave} releases {keys}{traffic}"


def holds_at(state: RolloutState) -> str:
    """Where a pause holds: before the promotion of running stages, and before the next wave."""
    running = [s.key for s in state.stages if s.status in ("deploying", "analyzing", "promoting")]
    nxt = (state.current_wave or 0) + (1 if running or any(s.status == "soaking" for s in state.stages) else 0)
    parts = [f"before promoting {', '.join(running)}"] if running else []
    if nxt and nxt <= state.waves:
        parts.append(f"before wave {nxt}")
    return " and ".join(parts) or "at the next safe point"


def waiting_window(state: RolloutState) -> list[str]:
    """The stages held back by a closed deployment window (the window hold's targets)."""
    h = find_hold(state.holds, "window")
    return sorted(h.targets) if h is not None else []


def how_to_act(state: RolloutState, *, soaking: list[str]) -> list[tuple[str, dict[str, object]]]:
    """The updates a release manager can send now, each with an example JSON payload."""
    if state.status in TERMINAL:
        return []
    paused, window = state.pause is not None, waiting_window(state)
    out: list[tuple[str, dict[str, object]]] = []
    if state.awaiting_wave is not None:
        out.append(("approve", {"wave": state.awaiting_wave, "approver": WHO, "comment": "looks good"}))
        out.append(("reject", {"wave": state.awaiting_wave, "approver": WHO, "reason": "why"}))
    held = find_hold(state.holds, "failure")
    if held is not None and held.targets:
        out.append(("resolve_hold", {"stage": held.targets[0], "action": "retry", "by": WHO}))
        out.append(("resolve_hold", {"stage": held.targets[0], "action": "promote", "by": WHO, "reason": "why"}))
    if window:
        out.append(("override_window", {"stage": window[0], "by": WHO, "reason": "why"}))
    if soaking:
        out.append(("skip_soak", {"stage": soaking[0], "by": WHO, "reason": "why"}))
    out.append(("resume", {"by": WHO}) if paused else ("pause", {"by": WHO, "reason": "why"}))
    out.append(("abort", {"by": WHO, "reason": "why"}))
    return out


def rollout_details(state: RolloutState, plan: Plan | None, *, soaking: list[str]) -> str:
    """The rollout's dashboard in Markdown."""
    s = state
    head = f"## {s.service} `{s.version}` — **{s.status.replace('_', ' ').upper()}**"
    if s.current_wave and not s.finished:
        head += f" · wave {ratio(s.current_wave, s.waves)}"
    paras = [head]
    if s.reason:
        paras.append(f"**Reason:** {md(s.reason)}")
    if s.waiting_for:
        paras.append(f"**Waiting for:** {md(s.waiting_for)}")
        if s.awaiting_wave is not None and plan is not None:
            paras.append(f"**If approved:** {approval_releases(plan, s.awaiting_wave)}")
    if s.pause is not None and not s.finished:
        why = f": “{md(s.pause.why)}”" if s.pause.why else ""
        paras.append(f"**Paused** by {md(s.pause.by)} at {_when(s.pause.since)}{why} — holds {holds_at(s)}")
    paras.append(stage_table(s))
    examples = how_to_act(s, soaking=soaking)
    if examples:
        paras.append("**How to act** (More actions → Send an Update, or the `bifrost` CLI):\n\n"
                     + "\n".join(f"- `{name}` `{json.dumps(example)}`" for name, example in examples))
    if s.audit:
        paras.append("**Recent actions**\n\n" + "\n".join(f"- {md(audit_line(a))}" for a in s.audit[-AUDIT_LINES:]))
    return "\n\n".join(paras)


def in_progress(state: RolloutState) -> str:
    """The stages the rollout works on or waits for now, as BifrostStage shows them."""
    if state.finished:
        return ""
    if state.status == "rolling_back" and state.current_stages:
        return ", ".join(state.current_stages)
    if state.awaiting_wave is not None:
        return ", ".join(st.key for st in state.wave_stages(state.awaiting_wave))
    if state.status == "waiting_window":
        return ", ".join(waiting_window(state))
    if state.status == "held" and (held := find_hold(state.holds, "failure")) is not None:
        return ", ".join(held.targets)
    if state.status == "waiting_traffic":
        held = find_hold(state.holds, "traffic")
        return ", ".join(sorted(held.targets)) if held is not None else ""
    return ", ".join(state.current_stages)


# A stage in one of these has not changed its region: it has not started, or had nothing to deploy.
UNCHANGED: frozenset[str] = frozenset({"pending", "skipped"})


def furthest_environment(state: RolloutState) -> str:
    """The furthest environment the rollout has changed: `prod` once any production stage has started, even while
    a later test wave runs, a gate waits or the rollout has ended; `test` while only test stages have; else `-`."""
    changed = {st.environment for st in state.stages if st.status not in UNCHANGED}
    return "prod" if "prod" in changed else "test" if "test" in changed else "-"


def rollout_search(state: RolloutState, requested_by: str) -> list[SearchAttributeUpdate[Any]]:
    """The rollout's search attributes, all from its state: status, the stages in progress, the furthest
    environment it has changed."""
    env = furthest_environment(state)
    return [
        search.SERVICE.value_set(state.service),
        search.VERSION.value_set(state.version),
        search.STATUS.value_set(state.status),
        search.STAGE.value_set(in_progress(state) or "-"),
        search.ENVIRONMENT.value_set(env),
        search.REQUESTED_BY.value_set(requested_by),
    ]


def view(state: RolloutState, *, requested_by: str, plan: Plan | None = None,
              soaking: Sequence[str] = ()) -> tuple[list[SearchAttributeUpdate[Any]], str]:
    """What a rollout shows, all from its state: its search attributes and the UI's current details. The workflow
    publishes this on every change; the CLI sets these attributes when it submits one (models.submitted)."""
    return rollout_search(state, requested_by), rollout_details(state, plan, soaking=list(soaking))


def rollout_summary(state: RolloutState) -> RolloutSummary:
    """The rollout at a glance: status, wave, each stage's status and version."""
    wave = f"{state.current_wave}/{state.waves}" if state.current_wave else f"-/{state.waves}"
    return RolloutSummary(
        rollout=f"{state.service} {state.version}", status=state.status, wave=wave,
        stages={st.key: f"{status_cell(st)}, {st.version_now or '?'}" for st in state.stages},
        waiting_for=state.waiting_for, reason=state.reason,
    )
