"""How a stage judges its canary: deploy it beside a fresh baseline, gather a window no traffic change overlapped,
and run the sequential analysis, extending an inconclusive one as the judge allows.

A canary that fails raises `Judged`: it rolls back, or with `on_failure: hold` holds for the rollout's decision
(workflows/stage/holds.py); a retry judges a fresh window begun after the decision.
"""

from __future__ import annotations

import asyncio
import functools
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

from activities.analysis import AnalysisActivities
from activities.deploy import DeployActivities
from activities.errors import error_text
from activities.models import AnalysisInput, DeployInput, ReportInput
from canary.config import Decision
from common.types import MetricWindow
from workflows import options
from workflows.controls import audit_entry
from workflows.request import HOLDS
from workflows.stage.context import Failed, Judged, StageContext
from workflows.stage.holds import hold_on_failure
from workflows.stage.orders import Orders
from workflows.stage.steps import Steps
from workflows.stage.traffic import Traffic
from workflows.traffic_gate import MAX_REWINDOWS, traffic_facts

MAX_ANALYSIS_LOOKS = 11  # the most looks JudgeConfig allows (max_extensions <= 10): a bound the judge cannot lift
MAX_DATA_WAITS = 10  # a weighted step with too few samples to judge waits this many more windows at most
_NO_DATA = frozenset({"Nodata", "NodataFailMetric", "Error"})  # classes for which no test was run


class Judge:
    """Deploys canary and baseline and judges the canary, holding on failure when the request says so."""

    def __init__(self, stage: StageContext, orders: Orders, traffic: Traffic) -> None:
        self.stage = stage
        self.orders = orders
        self.traffic = traffic
        self.steps = Steps(stage)  # canary.traffic: weighted steps, each judged

    async def deploy_and_judge(self) -> None:
        """Deploy canary and baseline, then judge (and, on a held failure, retry) until it passes or rolls back."""
        stage, inp, canary = self.stage, self.stage.inp, self.stage.inp.canary
        previous = stage.detail.previous
        stage.report("deploying", f"canary `{inp.version}` and baseline `{previous}`", tell_rollout=False)
        deploys = [
            asyncio.ensure_future(stage.shielded(workflow.execute_activity_method(
                DeployActivities.deploy_baseline,
                DeployInput(stage=stage.ref, version=previous or inp.version, image=None, replicas=canary.baseline_replicas),
                summary=f"baseline {previous} in {stage.key}", **options.DEPLOY))),
            asyncio.ensure_future(stage.shielded(workflow.execute_activity_method(
                DeployActivities.deploy_canary,
                DeployInput(stage=stage.ref, version=inp.version, image=inp.image, replicas=canary.canary_replicas),
                summary=f"canary {inp.version} in {stage.key}", **options.DEPLOY))),
        ]
        # let both deploys settle before acting on a failure, so a rollback never races a running deploy
        for outcome in await asyncio.gather(*deploys, return_exceptions=True):
            if isinstance(outcome, ActivityError):
                raise Failed(f"deploy failed: {error_text(outcome)}")
            if isinstance(outcome, BaseException):
                raise outcome
        stage.check_stop()
        weighted = canary.traffic is not None
        start = None if weighted else await self.gather_window()
        retries = 0
        while True:
            try:
                if start is None:
                    await self.steps.run(functools.partial(self.judge_step, retries=retries))
                else:
                    await self.judge(start, retries)
                return
            except Judged as failed:
                if inp.on_failure not in HOLDS:
                    raise
                if await hold_on_failure(stage, self.orders, self.traffic, failed.reason) == "promote":
                    return
            retries += 1  # retry: a fresh window, begun after the decision; the old samples are not judged again
            if not weighted:  # weighted: the steps start over from the first, each on its own fresh window
                start = await self.gather_window(f"retry {retries}: ")

    async def judge_step(self, i: int, retries: int) -> None:
        """Judge weighted step i on a window begun once its weights took effect."""
        start = await self.gather_window(f"step {i + 1}: ")
        await self.judge(start, retries, step=i)

    async def gather_window(self, why: str = "") -> datetime:
        """Let the canary and baseline gather metrics for one analysis window; the window's start."""
        stage, canary = self.stage, self.stage.inp.canary
        start = workflow.now()
        if canary.analysis_minutes > 0:
            stage.report("analyzing", f"{why}collecting metrics for {canary.analysis_minutes:g} min")
            await stage.until(stage.stopped, timedelta(minutes=canary.analysis_minutes), f"canary window {stage.key}")
            stage.check_stop()
            start = await self.window_without_traffic_change(start)
        elif why:
            stage.report("analyzing", f"{why}judging again")
        return start

    async def judge(self, start: datetime, retries: int = 0, step: int | None = None) -> None:
        """Judge the canary on the window from `start` (extending an inconclusive analysis); Judged if it fails.

        A weighted `step` spends its share of the stage's budget (split evenly between the steps), and a look that
        had too few samples to test anything waits for more rather than deciding on nothing."""
        stage, inp, canary = self.stage, self.stage.inp, self.stage.inp.canary
        # sequential analysis needs a window to extend: without one (analysis_minutes 0) the judge decides once
        place = inp.place if canary.analysis_minutes > 0 else None
        look, waits, config = 1, 0, canary.judge
        suffix = f"-retry{retries}" if retries else ""
        if step is not None and canary.traffic is not None:
            n = len(canary.traffic.steps)
            suffix += f"-step{step + 1}"
            config = config.model_copy(update={"alpha": config.alpha / n, "rollout_alpha": config.rollout_alpha / n})
        while True:
            analysis_input = AnalysisInput(
                stage=stage.ref, rollout_id=inp.rollout_id,
                analysis_id=f"{stage.ref.region}-{stage.ref.environment}-canary{suffix}",
                metrics=canary.metrics, judge=config,
                window=MetricWindow(start=start, end=workflow.now(), interval_seconds=canary.interval_seconds),
                baseline_version=stage.detail.previous, canary_version=inp.version, place=place, look=look,
            )
            try:
                analysis = await stage.shielded(workflow.execute_activity_method(
                    AnalysisActivities.analyze_canary, analysis_input, summary=f"judge canary {stage.key}"
                    + (f" step {step + 1}" if step is not None else "")
                    + (f" (look {look})" if look > 1 else ""), **options.ANALYSIS))
            except ActivityError as err:
                raise Judged(f"canary analysis failed: {error_text(err)}") from None
            stage.state.analysis_looks = look
            decision = analysis.decision
            if (step is not None and decision is not None and analysis.result.verdict == "insufficient_data"
                    and waits < MAX_DATA_WAITS):  # a small step's few samples: wait for more, never judge on nothing
                waits += 1
                tested = any(m.classification not in _NO_DATA for m in analysis.result.metrics)
                if not tested or look < min(decision.max_looks, MAX_ANALYSIS_LOOKS):
                    await self.extend(decision.model_copy(update={
                        "reason": f"too few samples at this step's share ({analysis.result.summary})"}),
                        canary.analysis_minutes)
                    look += 1 if tested else 0  # a look that tested nothing spent none of the budget
                    continue
            # bounded: the judge extends at most max_extensions times (10 at most), and never past its last look
            if decision is None or decision.action != "extend" or look >= min(decision.max_looks, MAX_ANALYSIS_LOOKS):
                break
            await self.extend(decision, canary.analysis_minutes)
            look += 1
        st = stage.state
        stage.detail.analysis = analysis.result
        st.verdict, st.score, st.report_url = analysis.result.verdict, analysis.result.score, analysis.report_url
        if analysis.report_url:  # drawn beside the stage's work; the verdict never waits for the picture
            stage.draw(ReportInput.for_canary(analysis_input, analysis.result), f"canary report {stage.key}")
        if analysis.result.verdict != "pass":
            raise Judged(f"canary judged {analysis.result.verdict}: {analysis.result.summary}")
        stage.check_stop()

    async def window_without_traffic_change(self, start: datetime) -> datetime:
        """The start of an analysis window that no traffic change of the service overlapped (docs/traffic.md).

        A window in which weights moved (an evacuation or restore ran, or a step of one was applied) holds samples
        of two regimes: it is not judged; the stage waits a fresh window, at most MAX_REWINDOWS times, then judges
        the last one and says so. Read from the truth: the record set and the traffic workflow's own state."""
        stage, inp = self.stage, self.stage.inp
        minutes = inp.canary.analysis_minutes
        for fresh in range(1, MAX_REWINDOWS + 2):
            facts = await traffic_facts(inp.service, inp.environment, [inp.region])
            moved = facts.moved_since(inp.region, start)  # '' without a traffic target: nothing Bifrost moves
            if not moved:
                return start
            if fresh > MAX_REWINDOWS:
                stage.detail.audit.append(audit_entry("bifrost", "window-judged", stage.key, f"traffic still moved "
                                                      f"({moved}) after {MAX_REWINDOWS} fresh windows: the last is judged"))
                return start
            why = f"the analysis window overlapped a traffic change ({moved}): not judged; a fresh window ({fresh}/{MAX_REWINDOWS})"
            stage.detail.audit.append(audit_entry("bifrost", "window-discarded", stage.key, why))
            stage.state.extended = why
            stage.report("analyzing", why)
            start = workflow.now()
            await stage.until(stage.stopped, timedelta(minutes=minutes),
                              f"fresh canary window {stage.key} ({fresh}/{MAX_REWINDOWS})")
            stage.check_stop()
        return start

    async def extend(self, decision: Decision, minutes: float) -> None:
        """Inconclusive: show why, and gather as long again as the first window (the judge then sees the whole window)."""
        stage = self.stage
        stage.detail.analysis = decision.result
        stage.state.extended = f"analysis extended: {decision.reason}"
        stage.report("analyzing", stage.state.extended)
        await stage.until(stage.stopped, timedelta(minutes=minutes), f"canary window {stage.key} (look {decision.look + 1})")
        stage.check_stop()
