"""What a drill shows of itself: its search attributes and the Temporal UI's Current Details, pure functions of its
report, used by the workflow at every change (so a drill is found by `BifrostService` and has a page)."""

from __future__ import annotations

from temporalio.common import SearchAttributePair

from common.text import markdown as md
from workflows import search
from workflows.controls.details import when
from workflows.drill.models import DrillInput, DrillReport, RegionDrill


def view(report: DrillReport, inp: DrillInput, current: str | None = None) -> tuple[list[SearchAttributePair[str]], str]:
    """state -> (search attributes, current details): the service, the outcome so far, the region being drilled, who."""
    return [
        SearchAttributePair(search.SERVICE, inp.service),
        SearchAttributePair(search.STATUS, report.outcome),
        SearchAttributePair(search.STAGE, f"{current}/{inp.environment}" if current else "-"),
        SearchAttributePair(search.REQUESTED_BY, inp.requested_by),
    ], drill_details(report, inp, current)


def _region(r: RegionDrill) -> list[str]:
    drain = f"{r.drain_seconds:g} s" if r.drain_seconds is not None else "–"
    lines = [f"- **{md(r.region)}**: evacuation {md(r.evacuation or 'pending')}; restore {md(r.restore or 'pending')}; "
             f"drained in {drain}"]
    lines += [f"  - receivers' health, {md(h)}" for h in r.receivers_health]
    lines += [f"  - refused: {md(x)}" for x in r.refused]
    return lines


def drill_details(report: DrillReport, inp: DrillInput, current: str | None = None) -> str:
    """Where the drill is, what it drills and how, and each region's evacuation, restore and health looks."""
    lines = [f"## Drill of {md(inp.service)} ({inp.environment}) — **{report.outcome}**", "",
             f"Regions in turn: {md(', '.join(inp.regions))}; each stays evacuated {inp.hold_minutes:g} min; "
             f"steps {md(','.join(map(str, inp.evacuation.steps)))}; started by {md(inp.requested_by)} at "
             f"{when(report.started_at)}"]
    if current:
        lines += ["", f"Drilling now: **{md(current)}** (its evacuation or restore is a child run of this page)"]
    if report.reason:
        lines += ["", f"Reason: {md(report.reason)}" + (f" (ended {when(report.ended_at)})" if report.ended_at else "")]
    if report.regions:
        lines += ["", "Regions:", ""]
        for r in report.regions:
            lines += _region(r)
    lines += ["", "A drill changes traffic only through its evacuation and restore runs; to stop one, abort it there "
                  "(`bifrost traffic abort`); `bifrost drill unschedule` ends the schedule."]
    return "\n".join(lines)
