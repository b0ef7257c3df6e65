"""How a stage promotes its canary and soaks the new version while still watching it.

The soak looks at the promoted version every interval until it ends; an alarm fails the stage, the rollout's stop
or skip_soak ends it early. During long soaks the stage continues as new, carrying its soak progress, so no
history grows past a few thousand events.
"""

from __future__ import annotations

import math
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

from activities.analysis import AnalysisActivities
from activities.deploy import DeployActivities
from activities.errors import error_text
from activities.models import PromoteInput, ReportInput, SoakCheckInput, StageOnly
from common.types import MetricWindow
from workflows import options
from workflows.clock import wait_until
from workflows.stage.context import Failed, StageContext
from workflows.stage.models import SoakProgress

SOAK_REPORTS = 10  # the rollout hears about a soak's progress at most this many times
MAX_WINDOW_SAMPLES = 10_000  # a soak look fetches at most this many intervals (Prometheus refuses > 11,000 points)


class Soak:
    """Promotion (held while the rollout is paused) and the soak that follows it."""

    def __init__(self, stage: StageContext) -> None:
        self.stage = stage

    async def promote(self) -> None:
        """Promote the canary's version on the primary (after any pause), and plan the soak if there is one."""
        stage, inp = self.stage, self.stage.inp
        if stage.detail.hold:
            stage.report("promoting", "holding before promotion: the rollout is paused, or a stage is held on failure")
            await stage.until(lambda: not stage.detail.hold or stage.detail.stop_reason is not None,
                              summary="paused before promotion")
            stage.check_stop()
        soak = timedelta(hours=inp.soak_hours)
        stage.report("promoting", f"promoting `{inp.version}`")
        try:
            promoted = await stage.shielded(workflow.execute_activity_method(
                DeployActivities.promote,
                PromoteInput(stage=stage.ref, version=inp.version, image=inp.image, cleanup=soak <= timedelta(0)),
                summary=f"promote {inp.version} in {stage.key}", **options.DEPLOY))
        except ActivityError as err:
            raise Failed(f"promotion failed: {error_text(err)}") from None
        if promoted.previous_version is not None:
            stage.detail.previous = promoted.previous_version
            stage.state.version_before = promoted.previous_version
        stage.state.version_now = inp.version
        if promoted.cleanup_error:  # promoted: the new version stays; the leftovers need a person
            stage.state.reason = f"promoted, but {promoted.cleanup_error}"
        stage.check_stop()
        if soak > timedelta(0):
            start = workflow.now()
            interval = min(timedelta(minutes=inp.canary.soak_check_minutes), soak)
            stage.detail.soak = SoakProgress(started_at=start, ends_at=start + soak, interval=interval,
                                             max_looks=max(1, math.ceil(soak / interval)))
            stage.state.soak_max_looks, stage.state.soak_ends_at = stage.detail.soak.max_looks, stage.detail.soak.ends_at

    async def soak(self) -> None:
        """Look at the promoted version every interval until the soak ends; alarm, stop or skip end it early."""
        stage = self.stage
        assert stage.detail.soak is not None
        soak, st, canary = stage.detail.soak, stage.state, stage.inp.canary
        every = max(1, math.ceil(soak.max_looks / SOAK_REPORTS))
        while soak.looks_done < soak.max_looks:
            look = soak.looks_done + 1
            due = min(soak.started_at + soak.interval * look, soak.ends_at)
            stage.report("soaking", f"look {look}/{soak.max_looks}; soak ends {soak.ends_at:%Y-%m-%d %H:%M} UTC",
                         tell_rollout=stage.reported != "soaking" or look % every == 0)
            wait = wait_until(due, workflow.now())
            if wait > timedelta(0):
                await stage.until(lambda: stage.detail.skip_soak_reason is not None or stage.detail.stop_reason is not None,
                                  wait, f"soak {stage.key} look {look}/{soak.max_looks}")
            stage.check_stop()
            if stage.detail.skip_soak_reason is not None:
                st.reason = f"soak skipped: {stage.detail.skip_soak_reason}"
                break
            now = workflow.now()
            window_start = max(soak.started_at, now - timedelta(seconds=canary.interval_seconds * MAX_WINDOW_SAMPLES))
            check = SoakCheckInput(
                stage=stage.ref, rollout_id=stage.inp.rollout_id, metrics=canary.metrics, judge=canary.judge,
                window=MetricWindow(start=window_start, end=now, interval_seconds=canary.interval_seconds),
                baseline_version=stage.detail.previous, canary_version=stage.inp.version, look=look,
                max_looks=soak.max_looks, place=stage.inp.place,
            )
            try:
                checked = await stage.shielded(workflow.execute_activity_method(
                    AnalysisActivities.soak_check, check, summary=f"soak check {look}/{soak.max_looks} {stage.key}",
                    **options.ANALYSIS))
            except ActivityError as err:
                raise Failed(f"soak check failed: {error_text(err)}") from None
            stage.detail.last_look = checked.monitor
            soak.looks_done = st.soak_looks = look
            if checked.monitor.alarm:
                if checked.report_url:
                    st.report_url = checked.report_url
                    stage.draw(ReportInput.for_soak_look(check, checked.monitor), f"soak report {stage.key} look {look}")
                raise Failed(f"alarm during soak (look {look}/{soak.max_looks}): {'; '.join(checked.monitor.reasons)}")
            if soak.looks_done < soak.max_looks and self.history_full():
                await self.continue_as_new()
        stage.check_stop()
        try:
            await stage.shielded(workflow.execute_activity_method(
                DeployActivities.cleanup, StageOnly(stage=stage.ref),
                summary=f"remove canary and baseline in {stage.key}", **options.DEPLOY))
        except ActivityError as err:  # promoted and soaked: the new version stays; the leftovers need a person
            st.reason = f"soaked, but {error_text(err)}"

    def history_full(self) -> bool:
        info = workflow.info()
        return info.get_current_history_length() >= self.stage.inp.history_budget or info.is_continue_as_new_suggested()

    async def continue_as_new(self) -> None:
        """Start a fresh run that goes on with the soak: same input, plus everything this run learned."""
        stage = self.stage
        assert stage.detail.soak is not None
        await stage.outbox.flush()
        await workflow.wait_condition(workflow.all_handlers_finished)
        resume = stage.detail.model_copy(update={"runs": stage.detail.runs + 1})
        workflow.continue_as_new(stage.inp.model_copy(update={"resume": resume}))
