"""How the region guard takes a look at every region: one read-only activity judges each serving region against
the service's other regions and plans, read-only, an evacuation of each (its readiness); the guard keeps the
weights, each region's streaks and verdict, and the readiness of those serving."""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError

from activities.guard import GuardActivities
from activities.guard_models import GuardLookInput, GuardLookResult
from workflows.evacuation.calls import PLAN
from workflows.evacuation.models import HealthValue
from workflows.evacuation.workflow import _text
from workflows.guard.models import GuardState, RegionWatch
from workflows.guard.records import GUARD, GuardRecords
from workflows.guard.rules import home_weights


async def look(records: GuardRecords) -> None:
    """Look once and update every region's watch; a failed look is a note, and the guard looks again next time."""
    st, inp = records.state, records.inp
    st.look += 1
    records.enter("watching", doing=f"look {st.look}")
    try:
        res: GuardLookResult = await workflow.execute_activity_method(
            GuardActivities.guard_look,
            GuardLookInput(service=inp.service, environment=inp.environment, look=st.look,
                           window_seconds=inp.window_seconds, sample_interval_seconds=inp.sample_interval_seconds,
                           judge=inp.judge, metrics=inp.metrics, steps=inp.evacuation.steps,
                           headroom=inp.evacuation.headroom,
                           home_weights=home_weights(st)),
            summary=f"look {st.look}", **PLAN,
        )
    except ActivityError as err:
        st.notes = [f"look {st.look} failed: {_text(err)}; the guard looks again next time"]
        return
    before = (list(st.incident), {r: w.standing for r, w in st.regions.items()})
    seen(st, res)
    tell_changes(records, *before)
    records.publish()


def tell_changes(records: GuardRecords, incident: list[str], standing: dict[str, str]) -> None:
    """Notify once when a multi-region incident begins (urgent) or ends, and when a region's standing difference
    is first seen: each is shown on the page at every look, but told once."""
    st = records.state
    if st.incident and st.incident != incident:
        records.notify("guard_incident", f"URGENT: multi-region incident: {', '.join(st.incident)} worse than their "
                       "own history at once; the guard evacuates at most what the rules and capacity allow")
        records.audit(GUARD, "incident", ", ".join(st.incident))
    elif incident and not st.incident:
        records.notify("guard_incident_over", f"the multi-region incident ({', '.join(incident)}) is over")
        records.audit(GUARD, "incident_over", ", ".join(incident))
    for r, w in sorted(st.regions.items()):
        if w.standing and not standing.get(r):
            records.notify("guard_standing", f"{r} differs from its peers as it always does (not evacuated): "
                           f"{w.standing}", r)
            records.audit(GUARD, "standing", w.standing, target=r)


def seen(st: GuardState, res: GuardLookResult) -> None:
    """Take in what a look saw. A region with weight is serving unless the guard evacuated it (a probe share is
    not serving yet); readiness is kept only for serving regions (the only ones the guard may evacuate)."""
    st.last_look_at, st.weights, st.notes = workflow.now(), res.weights, res.notes
    st.incident = next((list(r.incident) for r in res.looks if r.incident), [])
    st.suspect = next((list(r.suspect) for r in res.looks if r.suspect), [])
    st.unsure = next((list(r.unsure) for r in res.looks if r.unsure), [])
    ready = {r.region: r for r in res.readiness}
    for region_look in res.looks:
        watch = st.regions.setdefault(region_look.region, RegionWatch(region=region_look.region))
        watch.weight = res.weights.get(region_look.region, 0)
        if watch.weight > 0 and not watch.evacuated_by_guard:
            watch.serving = True
        elif watch.weight == 0:
            watch.serving = False
        watch.streak = watch.streak.after(region_look)
        watch.unhealthy, watch.verdict = region_look.unhealthy, region_look.summary
        watch.standing = region_look.standing
        watch.no_data = bool(getattr(region_look, "no_data", False))
        monitor = getattr(region_look, "monitor", None)
        watch.values = [HealthValue.of(region_look.region, m) for m in monitor.metrics] if monitor is not None else []
        watch.readiness = ready.get(region_look.region) if watch.serving else None
