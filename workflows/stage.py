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
    from activities.models import (
        AnalysisInput, AnalysisResult, DeployInput, MetricWindow, PromoteInput, PromoteResult, RollbackInput,
        SoakCheckInput, SoakCheckResult, StageOnly, StageRef,
    )
    from workflows import options
    from workflows.models import StageInput, StagePhase, StageProgress, StageResult, StageStatus


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
        self.progress = StageProgress(key=self.ref.key, phase="pending")
        self.previous: str | None = None
        self.promoted = False
        self.hold = False
        self.skip_soak_reason: str | None = None
        self._outbox: list[asyncio.Future] = []

    # -- messages from the parent ------------------------------------------------------------------
    @workflow.query(description="Phase, verdict and soak progress of this stage.")
    def progress_query(self) -> StageProgress:
        return self.progress

    @workflow.signal(description="Internal: the rollout is paused; hold before promotion.")
    def set_hold(self, hold: bool) -> None:
        self.hold = hold

    @workflow.signal(description="Internal: end the soak now (sent by the rollout's skip_soak update).")
    def skip_soak(self, reason: str) -> None:
        self.skip_soak_reason = reason or "skipped"

    # -- the stage ---------------------------------------------------------------------------------
    async def _phase(self, phase: StageStatus, detail: str = "") -> None:
        changed = phase != self.progress.phase
        self.progress.phase = phase
        self.progress.detail = detail
        lines = [f"**Stage {self.ref.key}** — {phase}", f"{self.inp.service} `{self.previous}` → `{self.inp.version}`"]
        if detail:
            lines.append(detail)
        if self.progress.report_path:
            lines.append(f"Canary report: `{self.progress.report_path}`")
        workflow.set_current_details("\n\n".join(lines))
        parent = workflow.info().parent
        if changed and parent is not None:
            # Fire and forget: a cancellation that lands while a signal is in flight would be absorbed
            # by the signal's await, and the stage would carry on instead of rolling back.
            signal = workflow.get_external_workflow_handle(parent.workflow_id).signal(
                "stage_progress", StagePhase(key=self.ref.key, phase=phase, detail=detail)
            )
            self._outbox.append(asyncio.ensure_future(signal))

    @workflow.run
    async def run(self, inp: StageInput) -> StageResult:
        result = StageResult(key=self.ref.key, status="succeeded", started_at=workflow.now())
        await self._phase("deploying")
        try:
            self.previous = await workflow.execute_local_activity(  # a quick read: no extra server round trip
                "current_version", StageOnly(stage=self.ref), result_type=str,
                summary=f"read version in {self.ref.key}", **options.QUICK,
            )
        except (asyncio.CancelledError, ActivityError) as err:
            # nothing was touched yet: report the stage as untouched rather than as failed
            result.status = "skipped"
            result.reason = ("cancelled before it started" if isinstance(err, asyncio.CancelledError)
                             else f"could not read the current version: {_error_text(err)}")
            if isinstance(err, ActivityError):
                result.status = "rolled_back"
            return await self._done(result)
        result.previous_version = self.previous
        if self.previous == inp.version:
            result.status, result.final_version = "skipped", inp.version
            result.reason = f"{self.ref.key} already runs {inp.version}"
            await self._phase("skipped", result.reason)
            return await self._done(result)
        try:
            await self._deploy_and_judge(result)
            if result.status == "succeeded":
                await self._promote_and_soak(result)
        except asyncio.CancelledError:
            result.status, result.reason = "rolled_back", "cancelled: the rollout was aborted or another stage failed"
        except ActivityError as err:
            result.status, result.reason = "rolled_back", f"activity failed: {_error_text(err)}"
        except ApplicationError as err:
            result.status, result.reason = "rolled_back", str(err)
        if result.status == "succeeded":
            await workflow.execute_activity(
                "cleanup", StageOnly(stage=self.ref), summary=f"remove canary and baseline in {self.ref.key}",
                **options.DEPLOY,
            )
            result.final_version = inp.version
            await self._phase("succeeded", f"now on `{inp.version}`")
        else:
            await self._rollback(result)
        return await self._done(result)

    async def _done(self, result: StageResult) -> StageResult:
        result.ended_at = workflow.now()
        await asyncio.gather(*self._outbox, return_exceptions=True)
        return result

    async def _deploy_and_judge(self, result: StageResult) -> None:
        inp, canary = self.inp, self.inp.canary
        await self._phase("deploying", f"canary `{inp.version}` and baseline `{self.previous}`")
        deploys = [
            workflow.execute_activity(
                "deploy_baseline",
                DeployInput(stage=self.ref, version=self.previous or inp.version, image=None, replicas=canary.baseline_replicas),
                summary=f"baseline {self.previous} in {self.ref.key}", **options.DEPLOY,
            ),
            workflow.execute_activity(
                "deploy_canary",
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
            await self._phase("analyzing", f"collecting metrics for {canary.analysis_minutes:g} min")
            await workflow.sleep(timedelta(minutes=canary.analysis_minutes), summary=f"canary window {self.ref.key}")
        await self._phase("analyzing", "judging canary against baseline")
        analysis: AnalysisResult = await workflow.execute_activity(
            "analyze_canary",
            AnalysisInput(
                stage=self.ref, rollout_id=inp.rollout_id, analysis_id=f"{self.ref.region}-{self.ref.environment}-canary",
                metrics=canary.metrics, judge=canary.judge_config(),
                window=MetricWindow(start=start, end=workflow.now(), interval_seconds=canary.interval_seconds),
                baseline_version=self.previous, canary_version=inp.version,
            ),
            result_type=AnalysisResult, summary=f"judge canary {self.ref.key}", **options.ANALYSIS,
        )
        self.progress.analysis, self.progress.report_path = analysis.result, analysis.report_path
        result.verdict, result.score, result.report_path = analysis.result.verdict, analysis.result.score, analysis.report_path
        if analysis.result.verdict != "pass":
            result.status = "rolled_back"
            result.reason = f"canary judged {analysis.result.verdict}: {analysis.result.summary}"

    async def _promote_and_soak(self, result: StageResult) -> None:
        inp, canary = self.inp, self.inp.canary
        if self.hold:
            await self._phase("promoting", "rollout paused: holding before promotion")
            await workflow.wait_condition(lambda: not self.hold)
        await self._phase("promoting", f"promoting `{inp.version}`")
        promoted: PromoteResult = await workflow.execute_activity(
            "promote", PromoteInput(stage=self.ref, version=inp.version, image=inp.image),
            result_type=PromoteResult, summary=f"promote {inp.version} in {self.ref.key}", **options.DEPLOY,
        )
        self.promoted = True
        if promoted.previous_version is not None:
            self.previous = promoted.previous_version
            result.previous_version = promoted.previous_version
        soak = timedelta(hours=inp.soak_hours)
        if soak <= timedelta(0):
            return
        start = workflow.now()
        end = start + soak
        self.progress.soak_ends_at = end
        check = timedelta(minutes=canary.soak_check_minutes)
        looks = max(1, math.ceil(soak / check))
        for look in range(1, looks + 1):
            remaining = end - workflow.now()
            wait = min(check, remaining)
            await self._phase("soaking", f"look {look}/{looks}; soak ends {end:%Y-%m-%d %H:%M} UTC")
            if wait > timedelta(0):
                try:
                    await workflow.wait_condition(
                        lambda: self.skip_soak_reason is not None, timeout=wait,
                        timeout_summary=f"soak {self.ref.key} look {look}/{looks}",
                    )
                except asyncio.TimeoutError:
                    pass
            if self.skip_soak_reason is not None:
                result.reason = f"soak skipped: {self.skip_soak_reason}"
                return
            checked: SoakCheckResult = await workflow.execute_activity(
                "soak_check",
                SoakCheckInput(
                    stage=self.ref, rollout_id=inp.rollout_id, metrics=canary.metrics, judge=canary.judge_config(),
                    window=MetricWindow(start=start, end=workflow.now(), interval_seconds=canary.interval_seconds),
                    baseline_version=self.previous, canary_version=inp.version, look=look, max_looks=looks,
                ),
                result_type=SoakCheckResult, summary=f"soak check {look}/{looks} {self.ref.key}", **options.ANALYSIS,
            )
            self.progress.last_look = checked.monitor
            result.soak_looks = look
            if checked.monitor.alarm:
                result.status = "rolled_back"
                result.reason = f"alarm during soak: {'; '.join(checked.monitor.reasons)}"
                return

    async def _rollback(self, result: StageResult) -> None:
        await self._phase("rolling_back", result.reason)
        try:
            await workflow.execute_activity(
                "rollback",
                RollbackInput(stage=self.ref, to_version=self.previous, reason=result.reason),
                summary=f"roll back {self.ref.key} to {self.previous}", **options.ROLLBACK,
            )
        except ActivityError as err:
            result.status = "failed"
            result.reason += f"; ROLLBACK FAILED: {_error_text(err)} — fix by hand, then re-run"
            result.final_version = None
            await self._phase("failed", result.reason)
            return
        result.final_version = self.previous
        await self._phase("rolled_back", result.reason)
