"""How a failing stage moves its region's traffic away around its rollback, and brings it back.

`on_failure: evacuate` (prod): the region's traffic moves to the other regions (pre-warming them) before the
rollback, the fastest mitigation; once the rolled-back version passes a health check it returns step by step.
`evacuate_and_hold`: the traffic moves away while the stage holds on failure, and returns before a retry or
promotion goes on. Each move is an EvacuationWorkflow child run to its end (docs/traffic.md).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

from activities.errors import error_text
from activities.traffic.messages import HealthInput, RegionHealth
from activities.traffic.shift import TrafficActivities
from common.types import MetricWindow
from workflows import options
from workflows.evacuation.child import run_traffic_change
from workflows.evacuation.models import EvacuationState
from workflows.evacuation.settings import EvacuationInput
from workflows.stage.context import StageContext


class Traffic:
    """The stage's own evacuate and restore; `evacuated`: the traffic it moved away while held (else None)."""

    def __init__(self, stage: StageContext) -> None:
        self.stage = stage
        self.evacuated: EvacuationState | None = None  # evacuate_and_hold: the region's traffic moved away while held

    def evacuates(self) -> bool:
        """Whether a stage that failed on its own moves its traffic away before rolling back."""
        inp = self.stage.inp
        return inp.on_failure == "evacuate" and inp.environment == "prod"

    async def change(self, move: EvacuationInput) -> tuple[EvacuationState | None, str]:
        """Run an evacuation or restore as a child workflow, to its end; its state (or None) and how it ended."""
        run = await run_traffic_change(move, summary=f"{move.direction} {move.region} for {self.stage.inp.service} "
                                       f"(stage {self.stage.key})", shield=self.stage.shielded)
        return run.state, run.line

    async def evacuate(self, then: str = "rolled back") -> EvacuationState | None:
        """Move the region's traffic away (pre-warming the others) before the rollback: the fastest mitigation."""
        inp, st = self.stage.inp, self.stage.state
        self.stage.report("evacuating", f"moving {inp.region}'s traffic to the other regions before the rollback")
        state, how = await self.change(EvacuationInput.for_stage(
            inp.evacuation, inp.canary.judge, service=inp.service, region=inp.region,
            environment=inp.environment, reason=f"stage {self.stage.key} failed: {st.reason}"))
        if state is not None and state.status == "evacuated":
            st.reason += f"; evacuated {inp.region} first (weights {state.weights_before} → {state.weights_now})"
            return state
        st.reason += f"; {how}; {then} without evacuating"
        return None

    async def restore(self, evacuated: EvacuationState) -> None:
        """Watch the rolled-back version for a while, then move the traffic back step by step (health-checked)."""
        stage, inp = self.stage, self.stage.inp
        st, e, previous = stage.state, inp.evacuation, stage.detail.previous
        stage.report("restoring_traffic", f"checking {previous} in {inp.region} before the traffic returns")
        started = workflow.now()
        await stage.until(lambda: False, timedelta(minutes=e.health_check_minutes), f"health check {stage.key}")
        baseline_start = (st.started_at or started) - timedelta(minutes=e.health_check_minutes)
        try:
            health = await stage.shielded(workflow.execute_activity_method(
                TrafficActivities.check_health,
                HealthInput(service=inp.service, environment=inp.environment,
                            regions=[RegionHealth(region=inp.region, metrics=inp.canary.metrics)],
                            baseline_window=MetricWindow(start=baseline_start, end=st.started_at or started,
                                                         interval_seconds=e.health_interval_seconds),
                            window=MetricWindow(start=started, end=workflow.now(), interval_seconds=e.health_interval_seconds),
                            judge=inp.canary.judge.model_copy(update={"min_samples": e.min_samples}),
                            look=1, max_looks=1),
                summary=f"health of {previous} in {stage.key}", **options.ANALYSIS))
        except ActivityError as err:
            st.reason += f"; traffic left evacuated: the health check failed ({error_text(err)}); restore it with " \
                         f"`bifrost restore {inp.region} --service {inp.service}`"
            return
        if health.alarm:
            st.reason += f"; traffic left evacuated: {previous} is not healthy ({health.summary}); restore it " \
                         f"with `bifrost restore {inp.region} --service {inp.service}` once it is"
            return
        stage.report("restoring_traffic", f"{previous} is healthy: moving the traffic back to {inp.region}")
        restore = evacuated.restore_input(requested_by="bifrost", reason=f"{previous} passed its health check")
        state, how = await self.change(restore)
        if state is not None and state.status == "restored":
            st.reason += f"; traffic restored (weights {state.weights_now})"
        else:
            st.reason += f"; {how}; restore it with `bifrost restore {inp.region} --service {inp.service}`"
