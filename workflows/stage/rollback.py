"""How a stage rolls back and how it ends.

A stage that failed on its own ends red (`RolledBack`, carrying its state), so the workflow list points at it; a
stage rolled back on the rollout's order (its scope after another stage failed, an abort, a rejection) completes
(green) with status rolled_back. A rollback, once begun, is never cancelled halfway.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from activities.deploy import DeployActivities
from activities.errors import error_text
from activities.models import RollbackInput
from common import metrics
from common.types import OUTCOME_FAILURE_TYPES, StageStatus
from workflows import options
from workflows.stage.context import StageContext
from workflows.stage.details import stage_details
from workflows.stage.models import StageState
from workflows.stage.steps import Steps
from workflows.stage.traffic import Traffic


class Rollback:
    """Puts the primary back on the version found (moving traffic around it when asked) and closes the stage."""

    def __init__(self, stage: StageContext, traffic: Traffic, steps: Steps) -> None:
        self.stage = stage
        self.traffic = traffic
        self.steps = steps

    async def roll_back_and_end(self, *, mitigate: bool = False, ordered: bool | None = None) -> StageState:
        """Put the primary back on the version found, remove canary and baseline; never cancelled halfway.

        With `mitigate` (this stage failed on its own) and `on_failure: evacuate`, its region's traffic moves to
        the other regions first, and returns, step by step, once the rolled-back version passes a health check."""
        self.stage.state.awaiting_verdict = False
        await self.steps.withdraw(self.stage.state.reason or "rolled back")  # a weighted canary: weight 0 first
        evacuated, self.traffic.evacuated = self.traffic.evacuated, None  # evacuate_and_hold: moved away when it held
        if evacuated is None:
            evacuated = await self.traffic.evacuate() if mitigate and self.traffic.evacuates() else None
        ended = await self.roll_back()
        if evacuated is not None and ended == "rolled_back":
            await self.traffic.restore(evacuated)
        return await self.end(ended, ordered=not mitigate if ordered is None else ordered)

    async def roll_back(self) -> StageStatus:
        stage, st = self.stage, self.stage.state
        stage.report("rolling_back", st.reason)
        try:
            rolled = await stage.shielded(workflow.execute_activity_method(
                DeployActivities.rollback,
                RollbackInput(stage=stage.ref, to_version=stage.detail.previous, reason=st.reason),
                summary=f"roll back {stage.key} to {stage.detail.previous}", **options.ROLLBACK))
        except ActivityError as err:
            st.reason += f"; ROLLBACK FAILED: {error_text(err)} — fix by hand, then re-run"
            st.version_now = None
            return "failed"
        st.version_now = stage.detail.previous
        if rolled.cleanup_error:
            st.reason += f"; {rolled.cleanup_error}"
        return "rolled_back"

    async def end(self, status: StageStatus, *, ordered: bool = False) -> StageState:
        """Close the stage: wait for its reports and background work, then succeed or fail with its state.

        `ordered`: the rollout ordered this rollback (the stage did not fail on its own); it completes."""
        stage, st = self.stage, self.stage.state
        st.status = status
        st.ended_at = workflow.now()
        workflow.set_current_details(stage_details(st, service=stage.inp.service, version=stage.inp.version))
        metrics.stage_ended(workflow.metric_meter(), region=st.region, environment=st.environment, outcome=status,
                            started=st.started_at, ended=st.ended_at)
        await stage.outbox.flush()
        if status == "rolled_back" and ordered:
            return st
        if status in OUTCOME_FAILURE_TYPES:
            raise ApplicationError(f"{stage.key} {status.replace('_', ' ')}: {st.reason}", st,
                                   type=OUTCOME_FAILURE_TYPES[status], non_retryable=True)
        return st
