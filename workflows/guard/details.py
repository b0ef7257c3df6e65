"""What the region guard shows of itself: its search attributes and its Current Details in the Temporal UI.

`view` is the one mapping of a guard's state to both, used by the workflow when it publishes and by the
CLI when it starts a guard (the attributes a new run starts with). The details: every region's verdict, streaks
and readiness, pending proposals (and the JSON to approve them), the latest decisions; free text is escaped
for markdown."""

from __future__ import annotations

import json

from temporalio.common import SearchAttributePair

from activities.guard_models import Readiness
from common.text import markdown as md
from workflows import search
from workflows.controls.details import WHO
from workflows.evacuation.details import value_text
from workflows.guard.models import GuardInput, GuardState, RegionWatch


def view(state: GuardState, inp: GuardInput) -> tuple[list[SearchAttributePair[str]], str]:
    """The guard's search attributes (service, status, the regions it evacuated or "-", who started it) and its
    Current Details."""
    evacuated = ",".join(sorted(state.evacuated())) or "-"
    return [
        SearchAttributePair(search.SERVICE, inp.service),
        SearchAttributePair(search.STATUS, state.status),
        SearchAttributePair(search.STAGE, evacuated),
        SearchAttributePair(search.REQUESTED_BY, inp.requested_by),
    ], guard_details(state, inp)


def readiness_text(readiness: Readiness | None) -> str:
    """One region's readiness in words: "-" (not known, or not serving), "ready", or "NOT READY: " and why."""
    if readiness is None:
        return "-"
    return "ready" if readiness.ready else "NOT READY: " + "; ".join(readiness.problems)


def readiness_view(state: GuardState) -> dict[str, dict[str, object]]:
    """The `readiness` query's answer: for each serving region, whether the others could absorb its traffic now
    (`ready`: None while not known yet; `problems`, `receivers`) and its standing difference, if any (worse than its
    peers as it always is at this time of day: a known risk, not a reason to evacuate)."""
    return {r: {**(w.readiness.model_dump(mode="json", exclude={"region"}) if w.readiness else
                   {"ready": None, "problems": [], "receivers": {}}), "standing": w.standing}
            for r, w in sorted(state.regions.items()) if w.serving}


def verdict_cell(w: RegionWatch) -> str:
    """The last look's state (unhealthy, no data, healthy) and its evidence: each metric, the region's peers → the
    region, with n each side; "healthy" only beside values that were compared."""
    word = "**unhealthy**" if w.unhealthy else "**no data**" if w.no_data or not w.values else "**healthy**"
    values = "; ".join(value_text(v).replace(": ", ": peers ", 1) for v in w.values)
    return f"{word} — {values or md(w.verdict)[:300] or 'not looked at yet'}"


def guard_details(state: GuardState, inp: GuardInput) -> str:
    """The Current Details: the rules in force, every region, the pending proposals and the latest decisions."""
    judge = inp.judge
    lines = [f"## Region guard of {md(state.service)} ({state.environment}) — **{state.status}**", ""]
    lines.append(f"Mode **{inp.rules.mode}**, restore **{inp.rules.restore}**; look {state.look} every "
                 f"{inp.look_interval_seconds} s over {inp.window_seconds} s; sick after {judge.unhealthy_looks} "
                 f"unhealthy looks, well after {judge.healthy_looks} healthy ones; at most {inp.rules.max_evacuated} "
                 f"evacuated; {inp.rules.min_gap_minutes:g} min between automatic evacuations; false-alarm level "
                 f"{judge.look_level():.2g} per region-look")
    if state.incident:
        lines += ["", f"**Multi-region incident**: {md(', '.join(state.incident))} worse than their own history at "
                      "once; the guard evacuates at most what the rules and capacity allow"]
    if state.waiting_for:
        lines += ["", f"Waiting for: {md(state.waiting_for)}"]
    if state.reason:
        lines += ["", md(state.reason)]
    lines += ["", "| region | weight | serving | unhealthy / healthy looks | last verdict | readiness |", "|---|---|---|---|---|---|"]
    for r, w in sorted(state.regions.items()):
        ready = readiness_text(w.readiness)
        serving = "yes" if w.serving else ("evacuated by the guard" if w.evacuated_by_guard else "no")
        lines.append(f"| {md(r)} | {w.weight} | {serving} | {w.streak.unhealthy} / {w.streak.healthy} | "
                     f"{verdict_cell(w)} | {md(ready)[:300]} |")
    standing = [(r, w.standing) for r, w in sorted(state.regions.items()) if w.standing]
    if standing:
        lines += ["", "Standing differences (worse than the peers, as usual at this time of day; not evacuated):", ""]
        lines += [f"- **{md(r)}**: {md(why)[:300]}" for r, why in standing]
    history = [(r, w.evacuations) for r, w in sorted(state.regions.items()) if w.evacuations]
    if history:
        lines += ["", "Evacuations by the guard (latest last):", ""]
        for r, evs in history:
            lines.append(f"- **{md(r)}**: " + "; ".join(
                f"{e.evacuated_at:%Y-%m-%d %H:%M} → " + (f"{e.restored_at:%Y-%m-%d %H:%M}" if e.restored_at else
                                                        "not restored") for e in evs))
    if state.proposals:
        lines += ["", "Proposals (More actions → Send an Update → `approve`, or `bifrost guard approve`):", ""]
        for p in state.proposals:
            payload = json.dumps({"region": p.region, "approver": WHO, "comment": "why"})
            lines.append(f"- {p.action} **{md(p.region)}** (look {p.look}): {md('; '.join(p.reasons))[:500]} — `{payload}`")
    if state.decisions:
        lines += ["", "Latest decisions:", ""]
        for d in state.decisions[-10:]:
            lines.append(f"- {d.at:%H:%M:%S} look {d.look} {d.action} {md(d.region)}: {md('; '.join(d.reasons))[:300]}")
    if state.notes:
        lines += ["", *(f"- {md(n)}" for n in state.notes)]
    return "\n".join(lines)
