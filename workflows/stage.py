"""StageWorkflow: one (region, environment) step — canary beside a fresh baseline, judge, promote, soak.

Any failure rolls this stage back to the version it found and returns a result saying so;
the parent decides what else to roll back.
"""

from __future__ import annotations

import asyncio
import math
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.analysis import AnalysisActivities
    from activities.deploy import DeployActivities
    from activities.models import AnalysisInput, DeployInput, PromoteInput, RollbackInput, SoakCheckInput, StageOnly
    from common.types import MetricWindow, StageRef, StageStatus
    from workflows import options
    from workflows.details import stage_details
    from workflows.models import StageDetail, StageInput, StageState

PROGRESS_SIGNAL = "stage_progress"  # the rollout's handler for a stage's reports


def _error_text(err: BaseException) -> str:
    cause = err
    while cause.__cause__ is not None:
        cause = cause.__cause__
    return str(cause) or type(cause).__name__


@workflow.defn
class StageWorkflow:
    """Deploys, judges, promotes and soaks one stage; rolls it back on any failure or cancellation."""

    @workflow.init
    def __init__(self, inp: StageInput) -> None:
        self.inp = inp
        self.ref = StageRef(service=inp.service, region=inp.region, environment=inp.environment)
        self.state = StageState.of(inp.region, inp.environment, inp.wave)
        self.detail = StageDetail(state=self.state)
        self.previous: str | None = None
        self.hold = False
        self.skip_soak_reason: str | None = None
        self._outbox: list[asyncio.Future[None]] = []

    # -- messages from the parent ------------------------------------------------------------------
    @workflow.query(description="Status, verdict and soak progress of this stage.")
    def progress(self) -> StageDetail:
        return self.detail

    @workflow.signal(description="Internal: the rollout is paused; hold before promotion.")
    def set_hold(self, hold: bool) -> None:
        self.hold = hold

    @workflow.signal(description="Internal: end the soak now (sent by the rollout's skip_soak update).")
    def skip_soak(self, reason: str) -> None:
        self.skip_soak_reason = reason or "skipped"

    # -- the stage ---------------------------------------------------------------------------------
    def _report(self, status: StageStatus, detail: str = "") -> None:
        changed = status != self.state.status
        self.state.status = status
        workflow.set_current_details(stage_details(
            self.ref.key, status, self.inp.service, self.previous, self.inp.version, detail, self.state.report_path))
        parent = workflow.info().parent
        if changed and parent is not None:
            # Fire and forget: a cancellation that lands while a signal is in flight would be absorbed
            # by the signal's await, and the stage would carry on instead of rolling back.
            signal = workflow.get_external_workflow_handle(parent.workflow_id).signal(
                PROGRESS_SIGNAL, self.state.model_copy())
            self._outbox.append(asyncio.ensure_future(signal))

    @workflow.run
    async def run(self, inp: StageInput) -> StageState:
        result = self.state
        result.started_at = workflow.now()
        self._report("deploying")
        try:
            self.previous = await workflow.execute_local_activity_method(  # a quick read: no extra server round trip
                DeployActivities.current_version, StageOnly(stage=self.ref),
                summary=f"read version in {self.ref.key}", **options.QUICK_LOCAL,
            )
        except (asyncio.CancelledError, ActivityError) as err:
            if isinstance(err, asyncio.CancelledError):  # nothing was touched yet: the stage is untouched
                result.status, result.reason = "skipped", "cancelled before it started"
            else:
                result.status, result.reason = "rolled_back", f"could not read the current version: {_error_text(err)}"
            return await self._done(result)
        result.version_before = self.previous
        if self.previous == inp.version:
            result.version_now = inp.version
            result.reason = f"{self.ref.key} already runs {inp.version}"
            self._report("skipped", result.reason)
            return await self._done(result)
        outcome: StageStatus = "succeeded"
        try:
            outcome = await self._deploy_and_judge(result)
            if outcome == "succeeded":
                outcome = await self._promote_and_soak(result)
        except asyncio.CancelledError:
            outcome, result.reason = "rolled_back", "cancelled: the rollout was aborted or another stage failed"
        except ActivityError as err:
            outcome, result.reason = "rolled_back", f"activity failed: {_error_text(err)}"
        except ApplicationError as err:
            outcome, result.reason = "rolled_back", str(err)
        if outcome == "succeeded":
            await workflow.execute_activity_method(
                DeployActivities.cleanup, StageOnly(stage=self.ref),
                summary=f"remove canary and baseline in {self.ref.key}", **options.DEPLOY,
            )
            result.version_now = inp.version
            self._report("succeeded", f"now on `{inp.version}`")
        else:
            await self._rollback(result)
        return await self._done(result)

    async def _done(self, result: StageState) -> StageState:
        result.ended_at = workflow.now()
        await asyncio.gather(*self._outbox, return_exceptions=True)
        return result

    async def _deploy_and_judge(self, result: StageState) -> StageStatus:
        inp, canary = self.inp, self.inp.canary
        self._report("deploying", f"canary `{inp.version}` and baseline `{self.previous}`")
        deploys = [
            workflow.execute_activity_method(
                DeployActivities.deploy_baseline,
                DeployInput(stage=self.ref, version=self.previous or inp.version, image=None, replicas=canary.baseline_replicas),
                summary=f"baseline {self.previous} in {self.ref.key}", **options.DEPLOY,
            ),
            workflow.execute_activity_method(
                DeployActivities.deploy_canary,
                DeployInput(stage=self.ref, version=inp.version, image=inp.image, replicas=canary.canary_replicas),
                summary=f"canary {inp.version} in {self.ref.key}", **options.DEPLOY,
            ),
        ]
        # let both deploys settle before acting on a failure, so a rollback never races a running deploy
        for outcome in await asyncio.gather(*deploys, return_exceptions=True):
            if isinstance(outcome, BaseException):
                raise outcome
        start = workflow.now()
        if canary.analysis_minutes > 0:
            self._report("analyzing", f"collecting metrics for {canary.analysis_minutes:g} min")
            await workflow.sleep(timedelta(minutes=canary.analysis_minutes), summary=f"canary window {self.ref.key}")
        self._report("analyzing", "judging canary against baseline")
        analysis = await workflow.execute_activity_method(
            AnalysisActivities.analyze_canary,
            AnalysisInput(
                stage=self.ref, rollout_id=inp.rollout_id, analysis_id=f"{self.ref.region}-{self.ref.environment}-canary",
                metrics=canary.metrics, judge=canary.judge,
                window=MetricWindow(start=start, end=workflow.now(), interval_seconds=canary.interval_seconds),
                baseline_version=self.previous, canary_version=inp.version,
            ),
            summary=f"judge canary {self.ref.key}", **options.ANALYSIS,
        )
        self.detail.analysis = analysis.result
        result.verdict, result.score, result.report_path = analysis.result.verdict, analysis.result.score, analysis.report_path
        if analysis.result.verdict != "pass":
            result.reason = f"canary judged {analysis.result.verdict}: {analysis.result.summary}"
            return "rolled_back"
        return "succeeded"

    async def _promote_and_soak(self, result: StageState) -> StageStatus:
        inp, canary = self.inp, self.inp.canary
        if self.hold:
            self._report("promoting", "rollout paused: holding before promotion")
            await workflow.wait_condition(lambda: not self.hold)
        self._report("promoting", f"promoting `{inp.version}`")
        promoted = await workflow.execute_activity_method(
            DeployActivities.promote, PromoteInput(stage=self.ref, version=inp.version, image=inp.image),
            summary=f"promote {inp.version} in {self.ref.key}", **options.DEPLOY,
        )
        if promoted.previous_version is not None:
            self.previous = promoted.previous_version
            result.version_before = promoted.previous_version
        soak = timedelta(hours=inp.soak_hours)
        if soak <= timedelta(0):
            return "succeeded"
        start = workflow.now()
        end = start + soak
        self.detail.soak_ends_at = end
        check = timedelta(minutes=canary.soak_check_minutes)
        looks = max(1, math.ceil(soak / check))
        for look in range(1, looks + 1):
            remaining = end - workflow.now()
            wait = min(check, remaining)
            self._report("soaking", f"look {look}/{looks}; soak ends {end:%Y-%m-%d %H:%M} UTC")
            if wait > timedelta(0):
                try:
                    await workflow.wait_condition(
                        lambda: self.skip_soak_reason is not None, timeout=wait,
                        timeout_summary=f"soak {self.ref.key} look {look}/{looks}",
                    )
                except TimeoutError:
                    pass
            if self.skip_soak_reason is not None:
                result.reason = f"soak skipped: {self.skip_soak_reason}"
                return "succeeded"
            checked = await workflow.execute_activity_method(
                AnalysisActivities.soak_check,
                SoakCheckInput(
                    stage=self.ref, rollout_id=inp.rollout_id, metrics=canary.metrics, judge=canary.judge,
                    window=MetricWindow(start=start, end=workflow.now(), interval_seconds=canary.interval_seconds),
                    baseline_version=self.previous, canary_version=inp.version, look=look, max_looks=looks,
                ),
                summary=f"soak check {look}/{looks} {self.ref.key}", **options.ANALYSIS,
            )
            self.detail.last_look = checked.monitor
            result.soak_looks = look
            if checked.monitor.alarm:
                result.reason = f"alarm during soak: {'; '.join(checked.monitor.reasons)}"
                return "rolled_back"
        return "succeeded"

    async def _rollback(self, result: StageState) -> None:
        self._report("rolling_back", result.reason)
        try:
            await workflow.execute_activity_method(
                DeployActivities.rollback,
                RollbackInput(stage=self.ref, to_version=self.previous, reason=result.reason),
                summary=f"roll back {self.ref.key} to {self.previous}", **options.ROLLBACK,
            )
        except ActivityError as err:
            result.reason += f"; ROLLBACK FAILED: {_error_text(err)} — fix by hand, then re-run"
            result.version_now = None
            self._report("failed", result.reason)
            return
        result.version_now = self.previous
        self._report("rolled_back", result.reason)
