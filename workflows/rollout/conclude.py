"""How a rollout ends: every stage settled, then all kept (success) or rolled back by scope, each on its own page;
a cancellation request names who sent it; the run returns its state, ends Canceled (aborted or rejected, its state
in the memo: workflows/controls/ending.py) or fails with a type that names the outcome and its state as details."""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from common.types import OUTCOME_FAILURE_TYPES
    from workflows.controls.ending import CANCEL_REASON, end_canceled, name_canceller
    from workflows.rollout.context import Rollout
    from workflows.rollout.models import RolloutState, Stop
    from workflows.rollout.rollback import stages_to_roll_back
    from workflows.rollout.stages import Stages
    from workflows.rollout.updates import Abort, Ack, Rollback
    from workflows.stage.models import StageConclusion


class Conclusion:
    """The rollout's verdict on its stages, and how its run ends."""

    def __init__(self, rollout: Rollout, stages: Stages) -> None:
        self.r = rollout
        self.stages = stages

    async def conclude(self) -> None:
        """Settle every stage, then keep them all (success) or roll back by scope, each on its own page."""
        r, stages = self.r, self.stages
        started = list(r.children)
        await self._name_canceller()
        if not stages.settled(started):
            stages.stop_working(started, r.stop.reason if r.stop else "the rollout stopped")
            await r.controls.until(lambda: stages.settled(started))
            await self._name_canceller()  # a cancellation requested while the stages settled
        stages.collect(started)
        if r.state.failed_stage is None and r.stop is None:
            await stages.keep(started, "")
            r.enter("succeeded", reason="every stage succeeded")
            return
        stop = r.stop or Stop("rolled_back", f"{r.state.failed_stage}: {r.row(r.state.failed_stage or '').reason}")
        scope = stop.scope or r.req.rollback_scope
        r.enter("rolling_back", reason=stop.reason)
        targets = [st.key for st in stages_to_roll_back(r.state.stages, scope) if st.key in r.children]
        await stages.keep([k for k in started if k not in targets], f"kept: outside rollback scope {scope}")
        for key in targets:  # one at a time, latest wave first
            r.state.current_stages = [key]
            r.enter("rolling_back")
            r.audit("bifrost", "roll-back-stage", key, f"scope {scope}: {stop.reason}")
            stages.conclude(key, StageConclusion(
                action="roll_back", reason=f"rolled back by the rollout (scope {scope}): {stop.reason}"))
            await r.controls.until(lambda k=key: r.children[k].done())  # type: ignore[misc]
            stages.collect([key])
        status, reason = stop.status, stop.reason
        if any(s.status == "failed" for s in r.state.stages):
            status, reason = "failed", reason + " — some stages could not be rolled back; see their reasons"
        r.state.current_stages = []
        r.enter(status, reason=reason)

    async def _name_canceller(self) -> None:
        """If a cancellation request stops the rollout, name who sent it: in the reason and the audit trail."""
        r = self.r
        stop = r.stop
        if stop is None or stop.reason != CANCEL_REASON:
            return
        r.controls.stop = Stop("aborted", await name_canceller(r.controls))
        r.publish()

    async def close(self) -> RolloutState:
        """Tell people how it ended, publish the end, let every notice and update finish, then return the state,
        end Canceled (aborted) or fail with the outcome's type."""
        r = self.r
        state = r.state
        r.outbox.tell(f"rollout_{state.status}", state.reason)
        state.ended_at = workflow.now()
        r.publish()
        await r.outbox.flush()
        await workflow.wait_condition(workflow.all_handlers_finished)
        if state.status in ("aborted", "rejected"):  # a person or a gate said no: Canceled, not a red failure
            await end_canceled(state, "rollout", state.status)  # its state in the memo (returns if it cannot)
        if state.status != "succeeded":
            raise ApplicationError(f"{state.status.replace('_', ' ')}: {state.reason}", state,
                                   type=OUTCOME_FAILURE_TYPES[state.status], non_retryable=True)
        return state

    # -- the abort and rollback updates ------------------------------------------------------------
    def abort(self, req: Abort) -> Ack:
        self.r.audit(req.by, "abort", None, req.reason)
        self.r.halt(Stop("aborted", f"aborted by {req.by}: {req.reason}"))
        return Ack(message="aborting; rolling back")

    def roll_back(self, req: Rollback) -> Ack:
        scope = req.scope or self.r.req.rollback_scope
        self.r.audit(req.by, "rollback", None, f"scope {scope}: {req.reason}")
        self.r.halt(Stop("aborted", f"rolled back by {req.by} (scope {scope}): {req.reason}", scope))
        return Ack(message=f"rolling back, scope {scope}")
