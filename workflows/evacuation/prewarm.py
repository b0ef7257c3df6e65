"""How the regions that gain traffic are made ready before any weight changes: scaled up (pre-warmed), or, where
a HorizontalPodAutoscaler scales a region, its floor (minReplicas) raised instead of the replicas it would undo
(docs/traffic.md, "Pre-warm with autoscalers")."""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.traffic.messages import ScaleInput
    from activities.traffic.shift import TrafficActivities
    from workflows.evacuation.calls import CHANGE, SCALE, text
    from workflows.evacuation.progress import Progress


async def prewarm(run: Progress) -> None:
    """Scale every receiver the plan pre-warms (all at once); fail before any traffic moves if one cannot be."""
    todo = [r for r in run.planned.regions if r.prewarm_to is not None]
    if not todo:
        run.state.prewarmed_at = workflow.now()
        return
    run.set_status("pre_warming", doing="receivers to be scaled and ready: " + ", ".join(
        f"{r.region} {r.replicas_before}→{r.prewarm_to}" + (f" (HPA {r.autoscaler} minReplicas)" if run.hpa and r.autoscaler else "")
        for r in todo))
    for r in todo:
        if run.hpa and r.autoscaler is not None:  # before the change: a crash after it still puts it back
            run.state.raised[r.region] = r.prewarm_to or 0
    results = await asyncio.gather(*(
        workflow.execute_activity_method(
            TrafficActivities.scale,
            ScaleInput(stage=run.stage(r.region), replicas=r.prewarm_to or 0, direction="up", max_replicas=r.max_replicas,
                       autoscaler=r.autoscaler if run.hpa else None),
            summary=f"pre-warm {r.region} to {r.prewarm_to}", cancellation_type=CHANGE, **SCALE,
        ) for r in todo), return_exceptions=True)
    for r, res in zip(todo, results):
        if not isinstance(res, BaseException):
            run.state.scaled[r.region] = res.after
            if res.autoscaler is not None and res.min_after is not None:
                run.state.min_replicas_now[r.region] = res.min_after
            floor = f"; HPA {res.autoscaler} minReplicas {res.min_before} → {res.min_after}" if res.autoscaler else ""
            run.audit("bifrost", "pre-warm", f"{r.region}: {res.before} → {res.after} replicas{floor}")
    for res in results:
        if isinstance(res, BaseException):
            if isinstance(res, ActivityError):
                raise ApplicationError(f"pre-warm failed, no traffic was moved: {text(res)}") from res
            raise res
    run.state.prewarmed_at = workflow.now()
