"""EvacuationWorkflow: move a region's traffic to the others (pre-warmed, step by step, health-checked), or back.

One workflow per service (`traffic/<service>`): plan (read-only, refuses before anything changes), optional
approval (approval.py), pre-warm the regions that gain traffic (prewarm.py), then per step: change the weighted
records, wait at least the TTL (a durable timer), judge the gaining regions against their own pre-shift window
(shift.py). An alarm reverts to the last healthy step (ending.py). A restore walks the same levels back and then
scales the receivers down (scale.py). Where a HorizontalPodAutoscaler scales a region, pre-warm raises its floor
(minReplicas) instead of the replicas it would undo, and the floor the plan read goes back on restore, on abort
with revert, and on a failure before any traffic moved (docs/traffic.md, "Pre-warm with autoscalers").
Operators pause, resume, abort and approve with validated updates; `status` and the current details say
where it is, who asked and why. Other workflows run it as a child through child.py.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.traffic.shift import TrafficActivities
    from common.vocabulary import EVACUATION_TERMINAL, EvacuationPhase
    from workflows import options
    from workflows.controls import Ack, Controls, Stopped, pause_updates, stop_update
    from workflows.evacuation import ending
    from workflows.evacuation.approval import await_approval, check_approval, take_approval
    from workflows.evacuation.calls import PLAN, refused, text
    from workflows.evacuation.models import AbortShift, ApproveShift, EvacuationState
    from workflows.evacuation.prewarm import prewarm
    from workflows.evacuation.progress import Progress
    from workflows.evacuation.scale import scale_down
    from workflows.evacuation.settings import EvacuationInput
    from workflows.evacuation.shift import Alarm, shift

_text = text  # the guard reads an activity's failure with it (workflows/guard)


@workflow.defn(failure_exception_types=options.FAIL_ON_BUGS)
class EvacuationWorkflow:
    """One evacuation or restore of one region of one service."""

    @workflow.init
    def __init__(self, inp: EvacuationInput) -> None:
        self.inp = inp
        self.state = EvacuationState.of(inp, workflow.info().workflow_id)
        what = "evacuation" if inp.direction == "evacuate" else "restore"
        self.controls: Controls[AbortShift] = Controls(self.state, noun=f"{what} of {inp.region}",
                                                       terminal=EVACUATION_TERMINAL)
        self.progress = Progress(inp, self.state, self.controls)

    @workflow.run
    async def run(self, inp: EvacuationInput) -> EvacuationState:
        run = self.progress
        self.state.started_at = workflow.now()
        run.audit(inp.requested_by, inp.direction, f"{inp.region}: {inp.reason or '(no reason given)'}")
        run.set_status("planning", doing="the plan: reading the record set and replicas")
        problems = inp.problems()
        if problems:
            lines = "\n".join(f"  - {p}" for p in problems)
            return await ending.end(run, "refused", f"{inp.direction} of {inp.region} for {inp.service} refused, nothing was changed:\n{lines}")
        try:
            plan = await workflow.execute_activity_method(
                TrafficActivities.plan_traffic, inp.plan_input(), summary=f"plan {inp.direction} of {inp.region}", **PLAN)
        except ActivityError as err:
            status: EvacuationPhase = "refused" if refused(err) else "failed"
            return await ending.end(run, status, text(err) if refused(err) else f"could not plan (nothing was changed): {text(err)}")
        except asyncio.CancelledError:
            return await ending.cancelled(run, "cancelled before anything changed")
        run.take_plan(plan)
        run.audit("bifrost", "plan", f"{len(plan.steps)} steps {plan.levels}; wait {self.state.wait_seconds} s; "
                  f"receivers {', '.join(self.state.receivers) or '-'}")
        return await self._change(inp)

    async def _change(self, inp: EvacuationInput) -> EvacuationState:
        """Everything after the plan: approval, pre-warm, the steps, scaling down; each way out ends it."""
        run = self.progress
        try:
            await await_approval(run)
            await run.wait_unpaused("the pre-warm")
            await prewarm(run)
            await shift(run)
            await scale_down(run)
        except Alarm as alarm:
            return await ending.revert_after_alarm(run, alarm)
        except Stopped:
            return await ending.aborted(run)
        except asyncio.CancelledError:
            return await ending.cancelled(run, f"cancelled at step {self.state.step}: traffic left where it is (no revert)")
        except (ActivityError, ApplicationError) as err:
            return await ending.failed(run, f"{text(err)}; stopped at step {self.state.step}")
        done: EvacuationPhase = "evacuated" if inp.direction == "evacuate" else "restored"
        return await ending.end(run, done, f"{inp.region} {done}: weights {self.state.weights_now}")

    def _publish(self) -> None:
        """The shared pause/resume handlers publish through this (workflows/controls)."""
        self.progress.publish()

    # -- queries and updates -----------------------------------------------------------------------
    @workflow.query(description="Plan, weights and replicas before/now, every step and its health, audit trail.")
    def status(self) -> EvacuationState:
        return self.state

    pause, resume = pause_updates(
        holds_at="before the next step",
        pause='Hold before the next step (a running step and its TTL wait finish). JSON: {"by": "alice", "reason": "why"}.',
        resume='Continue a paused evacuation. JSON: {"by": "alice"}.')

    def _abort(self, req: AbortShift) -> str:
        self.controls.halt(req)
        self.progress.audit(req.by, "abort", f"{req.reason} (revert: {str(req.revert).lower()})")
        return "stopping; " + ("reverting to the weights and replicas before" if req.revert else "leaving traffic where it is")

    abort = stop_update(AbortShift, _abort, description='Stop now; "revert": true puts the weights and replicas back as they were, false leaves them. JSON: {"by": "alice", "reason": "why", "revert": true}.')

    @workflow.update(description='Let an evacuation waiting for approval start changing traffic. JSON: {"approver": "alice", "comment": "go"}.')
    def approve(self, req: ApproveShift) -> Ack:
        take_approval(self.progress, req)
        return Ack(message=f"approved by {req.approver}")

    @approve.validator
    def _validate_approve(self, req: ApproveShift) -> None:
        check_approval(self.progress, req)
