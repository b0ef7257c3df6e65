"""Markdown for the Temporal UI's Current Details, and the one-line summary: pure functions of a state.

The rollout's page is a dashboard — waves and stages (status, before → now, verdict and score, soak look
N/M and its end), what the rollout waits for and what an approval releases, the pause (who, why, where it
holds), how to act, and the last audit lines. A stage's page says where the stage is, which versions, its
verdict and report, and whether the rollout may still roll it back.
"""

from __future__ import annotations

import json
from typing import Any

from temporalio.common import SearchAttributeUpdate

from common.text import markdown as md
from common.text import web_url
from common.types import TERMINAL
from workflows import search
from workflows.controls import find_hold
from workflows.controls.details import AUDIT_LINES as AUDIT_LINES
from workflows.controls.details import GAP as GAP
from workflows.controls.details import WHO as WHO
from workflows.controls.details import audit_line as audit_line
from workflows.controls.details import link as link
from workflows.controls.details import row as _row
from workflows.controls.details import when as _when
from workflows.plan import Plan
from workflows.rollout.models import RolloutState, RolloutSummary
from workflows.stage.models import StageState


def verdict_cell(st: StageState) -> str:
    if st.verdict is None:
        return "–"
    score = f" {st.score:g}" if st.score is not None else ""
    return link(f"{st.verdict}{score}", web_url(st.report_url))


def soak_cell(st: StageState) -> str:
    if not st.soak_max_looks:
        return "–"
    ends = f", ends {_when(st.soak_ends_at)}" if st.soak_ends_at and st.status == "soaking" else ""
    return f"look {st.soak_looks}/{st.soak_max_looks}{ends}"


def versions_cell(st: StageState) -> str:
    before, now = st.version_before or "?", st.version_now or "?"
    return f"`{before}`" if before == now else f"`{before}` → `{now}`"


def status_cell(st: StageState) -> str:
    status = st.status.replace("_", " ")
    if st.status == "succeeded" and st.awaiting_verdict:
        status += " (may roll back)"
    return status


def stage_table(state: RolloutState) -> str:
    rows = [_row(["wave", "stage", "status", "version", "verdict", "soak"]), "|---|---|---|---|---|---|"]
    for st in state.stages:
        mark = "**" if st.key in state.current_stages and not state.finished else ""
        rows.append(_row([str(st.wave), f"{mark}{st.key}{mark}", md(status_cell(st)), versions_cell(st),
                          verdict_cell(st), soak_cell(st)]))
    return "\n".join(rows)


def approval_releases(plan: Plan, wave: int) -> str:
    """'approving wave 4 releases eu-west-1/prod + us-east-1/prod, 85% of production traffic'."""
    w = next((w for w in plan.waves if w.index == wave), None)
    if w is None:
        return f"approving wave {wave}"
    keys = " + ".join(s.key for s in w.stages)
    traffic = f", {w.traffic_share:.0%} of production traffic" if w.kind == "prod" else " (test)"
    return f"approving wave {wave} releases {keys}{traffic}"


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
        head += f" · wave {s.current_wave}/{s.waves}"
    paras = [head]
    if s.reason:
        paras.append(f"**Reason:** {md(s.reason)}")
    if s.waiting_for:
        wait = f"**Waiting for:** {md(s.waiting_for)}"
        if s.awaiting_wave is not None and plan is not None:
            wait += f" — {approval_releases(plan, s.awaiting_wave)}"
        paras.append(wait)
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


def rollout_summary(state: RolloutState) -> RolloutSummary:
    """The rollout at a glance: status, wave, each stage's status and version."""
    wave = f"{state.current_wave}/{state.waves}" if state.current_wave else f"-/{state.waves}"
    return RolloutSummary(
        rollout=f"{state.service} {state.version}", status=state.status, wave=wave,
        stages={st.key: f"{status_cell(st)}, {st.version_now or '?'}" for st in state.stages},
        waiting_for=state.waiting_for, reason=state.reason,
    )


def stage_details(st: StageState, *, service: str, version: str, detail: str = "") -> str:
    """A stage's own page: where it is, which versions, its verdict and report, what it waits for."""
    lines = [f"## Stage {st.key} — **{st.status.replace('_', ' ').upper()}**",
             f"{service}: `{st.version_before or '?'}` → `{version}`; now on `{st.version_now or st.version_before or '?'}`"]
    if st.reason:
        lines.append(f"**Reason:** {md(st.reason)}")
    if detail:
        lines.append(md(detail))
    if st.verdict is not None:
        report = f" — {link('canary report', st.report_url)}" if st.report_url else ""
        lines.append(f"**Verdict:** {st.verdict} (score {st.score:g}){report}" if st.score is not None
                     else f"**Verdict:** {st.verdict}{report}")
    if st.extended:  # the judge's own words: metric names (a restricted alphabet) and numbers
        lines.append(f"**Canary analysis:** look {st.analysis_looks} — {md(st.extended)}")
    if st.soak_max_looks:
        lines.append(f"**Soak:** {soak_cell(st)}")
    if st.awaiting_verdict:
        lines.append("**Waiting for:** the rollout's verdict — it keeps this version when every stage succeeds, "
                     "and rolls this stage back if a later stage fails (by the rollout's rollback scope)")
    return "\n\n".join(lines)
