"""How replicas and HPA floors go back down: after a restore's last step (the receivers back to their replicas
before, the floors back to what the plans read), and when an abort or a failure puts things back."""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.traffic.messages import ScaleInput
    from activities.traffic.shift import TrafficActivities
    from workflows.evacuation.calls import CHANGE, SCALE, text
    from workflows.evacuation.progress import Progress


async def scale_down(run: Progress) -> None:
    """After the last step: scale the regions the plan scales down, and (a restore) put the HPA floors back."""
    # a restore puts back the evacuation's floors and its own; an evacuation's floors hold its traffic
    floors = raised_floors(run, evacuations_too=True) if run.inp.direction == "restore" else {}
    todo = [r for r in run.planned.regions if r.scale_down_to is not None and not (run.hpa and r.autoscaler)]
    if not todo and not floors:
        return
    run.set_status("scaling_down", doing="regions to scale back: " + ", ".join(
        [f"{r.region} {r.replicas_before}→{r.scale_down_to}" for r in todo]
        + [f"{region} HPA minReplicas → {n}" for region, n in floors.items()]))
    await scale_back(run, {r.region: r.scale_down_to or 0 for r in todo}, "scale down", floors)


def raised_floors(run: Progress, *, evacuations_too: bool = False) -> dict[str, int]:
    """The HPA floors this workflow raised, back to what its plan read; with `evacuations_too` (a restore that
    ended) also the evacuation's, from restore_to. An aborted restore leaves those: its traffic is back out."""
    if not run.hpa:
        return {}
    floors = {r: run.state.min_replicas_before[r] for r in run.state.raised if r in run.state.min_replicas_before}
    if evacuations_too and run.inp.restore_to is not None:
        floors |= {r: n for r, n in run.inp.restore_to.min_replicas.items() if r in run.state.autoscalers}
    return floors


async def scale_back(run: Progress, targets: dict[str, int], action: str, floors: dict[str, int] | None = None) -> None:
    """Scale primaries down to `targets`, and put HPA floors back to `floors` (the HPA then scales at its pace)."""
    floors = floors or {}
    inputs = [ScaleInput(stage=run.stage(region), replicas=n, direction="down") for region, n in targets.items()]
    inputs += [ScaleInput(stage=run.stage(region), replicas=n, direction="down", autoscaler=run.state.autoscalers[region],
                          min_replicas=n) for region, n in floors.items()]
    results = await asyncio.gather(*(
        workflow.execute_activity_method(
            TrafficActivities.scale, si,
            summary=f"{action} {si.stage.region} to " + (f"minReplicas {si.min_replicas}" if si.autoscaler else str(si.replicas)),
            cancellation_type=CHANGE, **SCALE,
        ) for si in inputs), return_exceptions=True)
    failed = []
    for si, res in zip(inputs, results):
        region = si.stage.region
        if isinstance(res, BaseException):
            failed.append(f"{region}: {text(res)}")
        elif si.autoscaler is not None:
            run.state.raised.pop(region, None)
            if res.min_after is not None:
                run.state.min_replicas_now[region] = res.min_after
            run.audit("bifrost", action, f"{region}: HPA {res.autoscaler} minReplicas {res.min_before} → {res.min_after}")
        else:
            run.state.scaled[region] = res.after
            run.audit("bifrost", action, f"{region}: {res.before} → {res.after} replicas")
    if failed:
        raise ApplicationError(f"{action} failed ({'; '.join(failed)})")
