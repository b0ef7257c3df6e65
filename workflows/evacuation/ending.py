"""How an evacuation or restore ends: reverted after an alarm, aborted (put back or left), failed, cancelled, or
done, and in every case the weights read back, the notice sent and the outcome returned or raised.

An aborted evacuation or restore ends as a failure of type Aborted with its state as the details (the rollouts'
convention: red in the UI, read back by the CLI); one started by hand (no parent) ends Canceled instead, its state
in the memo."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.traffic.messages import ReadTrafficInput
    from activities.traffic.shift import REFUSED, TrafficActivities
    from common import notices
    from common.types import EVACUATION_FAILED, OUTCOME_FAILURE_TYPES
    from common.vocabulary import EvacuationPhase
    from workflows.controls.ending import end_canceled, name_canceller
    from workflows.evacuation.calls import READ, text
    from workflows.evacuation.models import EvacuationState, aborted_message
    from workflows.evacuation.progress import Progress
    from workflows.evacuation.scale import raised_floors, scale_back
    from workflows.evacuation.shift import Alarm, set_weights


async def revert_after_alarm(run: Progress, alarm: Alarm) -> EvacuationState:
    """Back to the last healthy step's weights (the pre-warmed receivers keep their replicas)."""
    plan, k = run.planned, alarm.step
    back = plan.steps[k - 2] if k >= 2 else run.state.weights_before
    where = f"step {k - 1} ({plan.levels[k - 2]}%)" if k >= 2 else "the weights before the first step"
    run.audit("bifrost", "alarm", f"after step {k}: {alarm.reasons}")
    run.set_status("reverting", reason=f"alarm after step {k}: {alarm.reasons}", doing=f"revert to {where}")
    try:
        await set_weights(run, back, f"revert to {where} after an alarm")
    except (ActivityError, asyncio.CancelledError) as err:
        return await end(run, "failed", f"alarm after step {k} ({alarm.reasons}), and the revert to {where} "
                         f"failed: {text(err)}; set the weights by hand")
    run.state.step = k - 1
    return await end(run, "reverted", f"alarm after step {k}: {alarm.reasons}; traffic is back at {where}; "
                     "pre-warmed regions keep their replicas")


async def aborted(run: Progress) -> EvacuationState:
    """Stopped by `abort`: put the weights, replicas and floors back (revert), or leave them where they are."""
    stop = run.controls.stop
    assert stop is not None
    what = f"aborted by {stop.by}: {stop.reason}"
    state = run.state
    if state.weights_now == state.weights_before and not state.scaled and not state.raised:
        return await end(run, "aborted", f"{what}; nothing was changed")
    if not stop.revert:
        return await end(run, "aborted", f"{what}; traffic and replicas left as they are (step {state.step})")
    run.set_status("reverting", reason=what, doing="the weights and replicas before")
    try:
        if state.weights_now != state.weights_before:
            await set_weights(run, state.weights_before, "revert after abort")
            state.step = 0
            if state.scaled and run.plan is not None:
                wait = timedelta(seconds=run.plan.wait_seconds + run.inp.extra_wait_seconds)
                run.set_status("reverting", doing=f"{wait.total_seconds():g} s (TTL) before scaling back")
                await workflow.sleep(wait, summary="TTL before scaling back")
        if state.scaled or state.raised:
            await scale_back(run, {r: state.replicas_before[r] for r in state.scaled
                                   if r in state.replicas_before and r not in state.raised}, "scale back",
                             raised_floors(run))
    except (ActivityError, ApplicationError, asyncio.CancelledError) as err:
        return await end(run, "failed", f"{what}; the revert failed: {text(err)}; check the weights and replicas by hand")
    return await end(run, "aborted", f"{what}; weights and replicas put back as they were")


async def failed(run: Progress, what: str) -> EvacuationState:
    """A failure: with no traffic moved, the HPA floors it raised go back; with traffic moved they stay with it."""
    if not run.state.raised:
        return await end(run, "failed", f"{what}, nothing reverted")
    raised = ", ".join(f"{r} {n}" for r, n in sorted(run.state.raised.items()))
    if run.state.weights_now != run.state.weights_before:
        return await end(run, "failed", f"{what}, nothing reverted; the HPA floors stay raised ({raised}) for the "
                         "traffic moved: `bifrost restore` puts them back")
    run.set_status("reverting", doing=f"the HPA floors before ({raised})")
    try:
        await scale_back(run, {}, "put back", raised_floors(run))
    except (ActivityError, ApplicationError, asyncio.CancelledError) as err:
        return await end(run, "failed", f"{what}, no traffic moved; putting the HPA floors back failed: {text(err)}; "
                         "set their minReplicas by hand")
    return await end(run, "failed", f"{what}, no traffic moved; the HPA floors are back as they were")


async def cancelled(run: Progress, reason: str) -> EvacuationState:
    """End aborted by a cancellation request, naming who sent it (in the reason and the audit trail)."""
    return await end(run, "aborted", f"{reason}; {await name_canceller(run.controls)}")


async def _read_back(run: Progress, status: EvacuationPhase, reason: str) -> tuple[EvacuationPhase, str]:
    """Read the weights and replicas back; the end state comes from the record set, never the plan."""
    assert run.plan is not None
    try:
        snap = await workflow.execute_activity_method(
            TrafficActivities.read_traffic,
            ReadTrafficInput(service=run.inp.service, environment=run.inp.environment, region=run.inp.region,
                             replicas_of=sorted(run.state.replicas_before)),
            summary="read back weights and replicas", **READ,
        )
        run.state.weights_after, run.state.replicas_after = snap.weights, snap.replicas
        run.state.weights_now = snap.weights
    except ActivityError as err:
        run.state.weights_after = dict(run.state.weights_now)
        reason += f" (could not read back the final weights: {text(err)})"
        if status in ("evacuated", "restored"):
            status, reason = "failed", f"{reason}; the weights Route 53 holds are unknown, check them"
    if status in ("evacuated", "restored") and run.plan.steps:
        planned = run.plan.steps[-1]
        if {k: v for k, v in run.state.weights_after.items() if planned.get(k, v) != v}:
            status = "failed"
            reason = (f"the {run.inp.direction} planned to end at {planned} but the record set reads "
                      f"{run.state.weights_after}; it did not end as planned, check who else moves traffic")
    return status, reason


async def end(run: Progress, status: EvacuationPhase, reason: str) -> EvacuationState:
    """Read back the weights and replicas, set the final status, and return (or fail, for refused/failed)."""
    if run.plan is not None:
        status, reason = await _read_back(run, status, reason)
    await asyncio.gather(*run.report_starts, return_exceptions=True)  # no report child left unstarted
    run.state.ended_at = workflow.now()
    run.audit("bifrost", status, reason)
    run.set_status(status, reason=reason)
    if run.state.steps:  # traffic moved (or was meant to): say where it ended
        run.notice(notices.TRAFFIC_ENDED, f"{status}: {reason}", run.state.weights_now)
    await run.outbox.flush()
    await workflow.wait_condition(workflow.all_handlers_finished)
    inp = run.inp
    if status in ("refused", "failed"):
        message = reason if status == "refused" else f"{inp.direction} of {inp.region} failed: {reason}"
        raise ApplicationError(message, run.state,
                               type=REFUSED if status == "refused" else EVACUATION_FAILED, non_retryable=True)
    if status == "aborted" and workflow.info().parent is None:
        # one started by hand ends Canceled like an aborted rollout, its state in the memo; a child (of a stage,
        # a guard, a drill, a revert) fails `Aborted` below: its parent reads the state from the failure
        await end_canceled(run.state, "evacuation")  # returns only if it cannot
    if status == "aborted":  # red, like an aborted rollout
        raise ApplicationError(aborted_message(run.state), run.state, type=OUTCOME_FAILURE_TYPES["aborted"],
                               non_retryable=True)
    return run.state
