"""What an evacuation shows: its search attributes and the Temporal UI's Current Details, pure functions of its
state. `view` is the one mapping; the workflow publishes it and the CLI starts a run with its attributes.
"""

from __future__ import annotations

import json

from temporalio.common import SearchAttributePair

from common.text import markdown as md
from common.text import ratio
from common.vocabulary import EVACUATION_TERMINAL
from workflows import search
from workflows.controls import find_hold
from workflows.controls.details import WHO, link
from workflows.evacuation.models import EvacuationState, HealthValue, StepRecord


def how_to_act(state: EvacuationState, *, paused: bool, awaiting_approval: bool) -> list[tuple[str, dict[str, object]]]:
    """The updates an operator can send now, each with an example JSON payload."""
    if state.status in EVACUATION_TERMINAL:
        return []
    out: list[tuple[str, dict[str, object]]] = []
    if awaiting_approval:
        out.append(("approve", {"approver": WHO, "comment": "go"}))
    out.append(("resume", {"by": WHO}) if paused else ("pause", {"by": WHO, "reason": "why"}))
    out.append(("abort", {"by": WHO, "reason": "why", "revert": True}))
    return out


def wait_line(state: EvacuationState) -> str:
    """How long each step waits before its health check, and why that long: the TTL, a target's minimum wait,
    the extra wait asked for, or the samples the health check needs."""
    s, h = state, state.health
    if not s.ttl_seconds:  # a state from before the TTL was kept
        return f"wait {s.wait_seconds} s after each step"
    parts = [f"TTL {s.ttl_seconds} s"]
    if s.settle_seconds > s.ttl_seconds:
        parts.append(f"the targets' minimum wait {s.settle_seconds} s")
    if h.extra_wait_seconds:
        parts.append(f"+ {h.extra_wait_seconds} s extra")
    needed = h.min_samples * h.health_interval_seconds
    if s.wait_seconds == needed and needed > max(s.ttl_seconds, s.settle_seconds) + h.extra_wait_seconds:
        parts.append(f"longer, so the health check has {h.min_samples} samples {h.health_interval_seconds} s apart")
    return f"wait {s.wait_seconds} s after each step ({'; '.join(parts)})"


def _number(x: float | None) -> str:
    return "–" if x is None else f"{x:.4g}"


def _against(st: StepRecord, region: str) -> str:
    """What the 'before' value is when it is not the region's own pre-shift window (a restore's peer)."""
    peer = st.compared_with.get(region)
    return f"{md(peer)} " if peer else ""


def _verdict(classification: str) -> str:
    """A metric's verdict in words a reader takes for what it is: no data is never a pass."""
    return {"Pass": "pass", "Nodata": "NO DATA", "Error": "NO DATA (error)"}.get(classification, classification)


def value_text(v: HealthValue, against: str = "") -> str:
    """One metric of a health look as evidence: its mean before (or `against`) → after, its verdict and n each side."""
    return (f"{md(v.metric)}: {against}{_number(v.before)} → {_number(v.after)} "
            f"({md(_verdict(v.classification))}{', critical' if v.critical else ''}; n {v.before_n} → {v.after_n})")


def step_lines(st: StepRecord) -> str:
    """One step: its level and weights, its health verdict, and under it each metric's mean before → after."""
    reports = ", ".join(link(f"{region} report", url) for region, url in sorted(st.reports.items()))
    line = (f"- {st.index}: {st.level}% → {md(json.dumps(st.weights, sort_keys=True))}"
            f"{'' if st.changed else ' (already in place)'}; health: {_health_word(st)}{md(st.health or 'pending')}"
            + (f" — {reports}" if reports else ""))
    values = [f"  - {md(v.region)} {value_text(v, _against(st, v.region))}" for v in st.values]
    return "\n".join([line, *values])


def _health_word(st: StepRecord) -> str:
    """The look's state first: healthy, alarm, or no data (checked but nothing compared)."""
    if st.checked_at is None:
        return ""
    return "**healthy** — " if st.healthy else "**ALARM** — " if st.healthy is False else "**no data** — "


def _weights_table(state: EvacuationState) -> str:
    ids = state.set_identifiers or {k: k for k in state.weights_before}
    final = state.planned[-1] if state.planned else {}
    rows = ["| region | weight before | now | planned end | replicas before | replicas now |", "|---|---|---|---|---|---|"]
    by_id = {sid: region for region, sid in ids.items()}
    for sid in sorted(state.weights_before or state.weights_now):
        region = by_id.get(sid, sid)
        mark = " (evacuated)" if region == state.region and state.direction == "evacuate" else \
            " (restored)" if region == state.region else " (receiver)" if region in state.receivers else ""
        rows.append(
            f"| {md(region)}{mark} | {state.weights_before.get(sid, '-')} | {state.weights_now.get(sid, '-')} | "
            f"{final.get(sid, '-')} | {state.replicas_before.get(region, '-')} | "
            f"{state.replicas_after.get(region, state.scaled.get(region, state.replicas_before.get(region, '-')))} |"
        )
    return "\n".join(rows)


def evacuation_details(state: EvacuationState) -> str:
    """Where the evacuation is, the weights, who asked and why, how to act, and the last audit entries."""
    s = state
    pause = find_hold(s.holds, "paused")
    paused, awaiting_approval = pause is not None, find_hold(s.holds, "approval") is not None
    verb = "Evacuating" if s.direction == "evacuate" else "Restoring"
    if s.status in EVACUATION_TERMINAL:
        verb = "Evacuation of" if s.direction == "evacuate" else "Restore of"
    head = f"## {verb} {md(s.region)} ({s.service}, {s.environment}) — **{s.status.replace('_', ' ')}**"
    paras = [head]
    if s.planned:
        levels = s.levels or s.steps_requested  # a state from before `levels` was kept: the levels asked for
        paras.append(f"Step {ratio(s.step, len(s.planned))}; levels {', '.join(f'{lv}%' for lv in levels)}; "
                     f"{wait_line(s)}; record set: {md(s.record_set)}")
    paras.append(f"Requested by **{md(s.requested_by)}**: {md(s.request_reason or '(no reason given)')}")
    if s.reason:
        paras.append(f"Reason: {md(s.reason)}")
    if s.waiting_for:
        paras.append(f"Waiting for: {md(s.waiting_for)}")
    if pause is not None and not pause.in_force and not s.finished:
        why = f": “{md(pause.why)}”" if pause.why else ""
        paras.append(f"Paused by {md(pause.by)}{why} — holds {md(pause.at)}")
    if s.weights_before or s.weights_now:
        paras.append(_weights_table(s))
    examples = how_to_act(s, paused=paused, awaiting_approval=awaiting_approval)
    if examples:
        paras.append("How to act (More actions → Send an Update, or the `bifrost traffic` CLI):\n\n"
                     + "\n".join(f"- `{name}`: `{json.dumps(example)}`" for name, example in examples))
    if s.steps:
        paras.append("Steps:\n\n" + "\n".join(step_lines(st) for st in s.steps))
    if s.audit:
        paras.append("Audit trail:\n\n" + "\n".join(
            f"- {a.at:%H:%M:%S} {md(f'{a.who}: {a.action} {a.detail}'.rstrip())}" for a in s.audit[-8:]))
    return "\n\n".join(paras)


def evacuation_search(state: EvacuationState) -> list[SearchAttributePair[str]]:
    """The run's search attributes: the service, its status, the region/environment it moves, who asked."""
    return [
        SearchAttributePair(search.SERVICE, state.service),
        SearchAttributePair(search.STATUS, state.status),
        SearchAttributePair(search.STAGE, f"{state.region}/{state.environment}"),
        SearchAttributePair(search.REQUESTED_BY, state.requested_by),
    ]


def view(state: EvacuationState) -> tuple[list[SearchAttributePair[str]], str]:
    """state -> (search attributes, current details): what the workflow publishes at every change."""
    return evacuation_search(state), evacuation_details(state)
