"""StageWorkflow: one (region, environment) step — canary beside a fresh baseline, judge, promote, soak.

A stage that fails (verdict, soak alarm, deploy error) rolls itself back and ends as a `RolledBack` failure
carrying its state. A stage that succeeds reports to its rollout and stays open until the rollout's verdict:
`keep` ends it as succeeded, `roll_back` rolls it back here, on its own page (a later stage failed).

The rollout stops a running stage with the `stop` signal, never by cancelling it: a stage that has begun
its rollback, or has finished its work, is not interrupted. Activities run shielded from workflow
cancellation; a cancellation request (the UI's, or the rollout being terminated) counts as a stop while
the stage works, and as "keep" once it waits for the verdict. During long soaks the stage continues as
new, carrying its soak progress, so no history grows past a few thousand events.

Anyone may send the stage's signals by hand, so each is only a poke: the stage asks its rollout what it
ordered (the rollout's `stage_orders` query, which only the rollout's validated updates and its own code
change) and acts on that answer, never on the signal's payload. A signal the rollout did not order is
ignored and leaves one line in the stage's audit (its `progress` query).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TypeVar

from pydantic import ValidationError
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, FailureError

with workflow.unsafe.imports_passed_through():
    from activities.analysis import AnalysisActivities
    from activities.deploy import DeployActivities
    from activities.errors import error_text
    from activities.models import (
        AnalysisInput,
        DeployInput,
        PromoteInput,
        ReportInput,
        RollbackInput,
        SoakCheckInput,
        StageOnly,
    )
    from activities.peers import PeerActivities, PeerQuery
    from activities.traffic.messages import HealthInput, RegionHealth
    from activities.traffic.shift import TrafficActivities
    from canary.config import Decision
    from common import metrics
    from common.types import INVALID_PAYLOAD, OUTCOME_FAILURE_TYPES, MetricWindow, StageRef, StageStatus
    from workflows import options
    from workflows.clock import wait_until
    from workflows.controls import audit_entry, until
    from workflows.evacuation.models import EvacuationInput, EvacuationState
    from workflows.evacuation.workflow import run_traffic_change
    from workflows.parentage import stage_refusal
    from workflows.report.workflow import start_report
    from workflows.request import HOLDS
    from workflows.stage.details import stage_details
    from workflows.stage.models import (
        HoldAction,
        HoldDecision,
        SoakProgress,
        StageConclusion,
        StageDetail,
        StageInput,
        StageOrders,
        StageState,
    )
    from workflows.traffic_gate import MAX_REWINDOWS, traffic_facts

MAX_ANALYSIS_LOOKS = 11  # the most looks JudgeConfig allows (max_extensions <= 10): a bound the judge cannot lift
PROGRESS_SIGNAL = "stage_progress"  # the rollout's handler for a stage's reports
STAGE_ORDERS_QUERY = "__bifrost_stage_orders"  # the rollout's record of what it told its stages; `__`: listed last in the UI
# A stage confirms the rollout's signals with the rollout's orders; the rollout takes a stage's progress from the
# stage's own `progress` query, not from the report signal.
# `on_failure: hold`: a canary that fails its analysis holds (canary and baseline running) until the rollout's
# decision: retry on a fresh window, promote, or roll back (the rollout's resolve_hold update or the hold's timeout).
# A stage rolled back on the rollout's order (its scope after another stage failed, an abort, a rejection)
# completes (green) with status rolled_back; only a stage that failed on its own ends red (RolledBack), so the
# workflow list points at the stage that failed.
SOAK_REPORTS = 10  # the rollout hears about a soak's progress at most this many times
MAX_WINDOW_SAMPLES = 10_000  # a soak look fetches at most this many intervals (Prometheus refuses > 11,000 points)

T = TypeVar("T")


class _Failed(Exception):
    """Internal: the stage cannot go on; `reason` says why. It rolls back. `stopped`: the rollout's stop is the
    cause (the stage did not fail on its own, so it completes rolled back instead of failing red)."""

    def __init__(self, reason: str, *, stopped: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.stopped = stopped


class _Judged(_Failed):
    """Internal: the canary failed its analysis (its verdict, or the analysis could not be made): with
    `on_failure: hold` the stage holds for a decision instead of rolling back."""


# The internal signals are pokes confirmed with the rollout; a stage that has ended has nothing left to obey, so a
# confirmation still in flight then is abandoned on purpose (without the SDK's "unfinished handler" warning).
_POKE = workflow.HandlerUnfinishedPolicy.ABANDON


@workflow.defn(failure_exception_types=options.FAIL_ON_BUGS)
class StageWorkflow:
    """Deploys, judges, promotes and soaks one stage; rolls it back on any failure or when stopped."""

    @workflow.init
    def __init__(self, inp: StageInput) -> None:
        self.inp = inp
        # a stage started by hand (no rollout judged its canary or orders it) fails at once; see workflows/parentage.py
        self.refusal = stage_refusal(inp.rollout_id, inp.service, inp.version, inp.region, inp.environment,
                                     workflow.info())
        self.ref = StageRef(service=inp.service, region=inp.region, environment=inp.environment)
        self.detail = inp.resume.model_copy() if inp.resume else StageDetail(
            state=StageState.of(inp.region, inp.environment, inp.wave))
        self.state = self.detail.state
        self.conclusion: StageConclusion | None = None
        self.decision: HoldDecision | None = None  # the rollout's decision on the current hold on failure
        self.evacuated: EvacuationState | None = None  # evacuate_and_hold: the region's traffic moved away while held
        self.cancelled = False
        self._reported: StageStatus | None = None
        self._outbox: list[asyncio.Task[None]] = []
        self._background: list[asyncio.Task[object]] = []
        self._confirming = asyncio.Lock()
        self._pokes: list[tuple[str, Callable[[StageOrders], str]]] = []

    # -- messages ----------------------------------------------------------------------------------
    @workflow.query(description="This stage: status, versions, verdict, soak progress, and the judge's findings.")
    def progress(self) -> StageDetail:
        return self.detail

    @workflow.signal(unfinished_policy=_POKE, description="Internal: the rollout is paused (true) or resumed; hold before promotion. "
                                 "Confirmed with the rollout.")
    async def set_hold(self, hold: bool) -> None:
        await self._confirm("set_hold", lambda o: "" if o.hold == hold else
                            f"the rollout is {'paused' if o.hold else 'not paused'}")

    @workflow.signal(unfinished_policy=_POKE, description="Internal: end the soak now (sent by the rollout's skip_soak update; confirmed with the rollout).")
    async def skip_soak(self, reason: str) -> None:
        await self._confirm("skip_soak", lambda o: "" if self.ref.key in o.skip_soak else
                            "the rollout has not ended this stage's soak (only its skip_soak update can)")

    @workflow.signal(unfinished_policy=_POKE, description="Internal: stop and roll back (the rollout was stopped or another stage failed; "
                                 "confirmed with the rollout). Ignored once the stage rolls back or has finished its work.")
    async def stop(self, reason: str) -> None:
        await self._confirm("stop", lambda o: "" if self.ref.key in o.stop else "the rollout has not stopped this stage")

    @workflow.signal(unfinished_policy=_POKE, description="Internal: the rollout's verdict on a finished stage: keep it, or roll it back "
                                 "(confirmed with the rollout).")
    async def conclude(self, conclusion: StageConclusion) -> None:
        def fits(o: StageOrders) -> str:
            given = o.conclude.get(self.ref.key)
            if given is None:
                return "the rollout has given no verdict on this stage"
            return "" if given.action == conclusion.action else f"the rollout's verdict on this stage is {given.action}"

        await self._confirm("conclude", fits)

    @workflow.signal(unfinished_policy=_POKE, description="Internal: the rollout decided on this stage's hold on failure "
                                 "(retry, promote, rollback); confirmed with the rollout, which only its resolve_hold "
                                 "update and the hold's timeout change.")
    async def resolve(self, decision: HoldDecision) -> None:
        def fits(o: StageOrders) -> str:
            given = o.resolve.get(self.ref.key)
            if given is None or given.hold != self.state.holds:
                return "the rollout has not decided on this stage's hold (only its resolve_hold update can)"
            return "" if given.action == decision.action else f"the rollout's decision on this hold is {given.action}"

        await self._confirm("resolve", fits)

    def _set_stop(self, reason: str) -> None:
        if self.detail.stop_reason is None:
            self.detail.stop_reason = reason or "stopped by the rollout"

    async def _confirm(self, signal: str, fits: Callable[[StageOrders], str]) -> None:
        """Ask the rollout what it ordered, obey that (not the signal), and note each signal that did not fit."""
        self._pokes.append((signal, fits))
        async with self._confirming:  # one question at a time; it answers every poke that came meanwhile
            pokes, self._pokes = self._pokes, []
            if not pokes:
                return
            orders, why = await self._orders()
            if orders is not None:
                self._obey(orders)
            for name, check in pokes:
                problem = why if orders is None else check(orders)
                if problem:
                    self.detail.audit.append(audit_entry("bifrost", f"ignored {name}", self.ref.key, problem))

    def _obey(self, orders: StageOrders) -> None:
        key = self.ref.key
        self.detail.hold = orders.hold
        if key in orders.stop:
            self._set_stop(orders.stop[key])
        if key in orders.skip_soak and self.detail.skip_soak_reason is None:
            self.detail.skip_soak_reason = orders.skip_soak[key] or "skipped"
        if key in orders.conclude and self.conclusion is None:
            self.conclusion = orders.conclude[key]
        decided = orders.resolve.get(key)
        if decided is not None and decided.hold == self.state.holds and self.decision is None:
            self.decision = decided

    async def _orders(self) -> tuple[StageOrders | None, str]:
        """The rollout's record of what it told its stages, or None and why it could not be had."""
        parent = workflow.info().parent
        rollout = parent.workflow_id if parent is not None else self.inp.rollout_id
        try:
            answer = await workflow.execute_activity_method(
                PeerActivities.query_workflow, PeerQuery(workflow_id=rollout, query=STAGE_ORDERS_QUERY),
                summary=f"confirm with {rollout}", **options.CONFIRM)
        except ActivityError as err:
            return None, f"the rollout {rollout} could not be asked ({error_text(err)})"
        if not answer.found or answer.error is not None:
            return None, (f"the rollout {rollout} does not exist" if not answer.found
                          else f"the rollout {rollout} did not answer ({answer.error})")
        try:
            return StageOrders.model_validate(answer.answer), ""
        except ValidationError:
            return None, f"the rollout {rollout} answered with something else than its orders"

    # -- plumbing ----------------------------------------------------------------------------------
    def _report(self, status: StageStatus, detail: str = "", *, tell_rollout: bool = True) -> None:
        """Show the stage on its page and, when something the rollout shows changed, tell the rollout."""
        self.state.status = status
        workflow.set_current_details(stage_details(self.state, service=self.inp.service, version=self.inp.version,
                                                   detail=detail))
        parent = workflow.info().parent
        if parent is None or not tell_rollout or status in OUTCOME_FAILURE_TYPES or status == "skipped":
            return  # how a stage ends reaches the rollout as its result, not as a report
        self._reported = status
        # Fire and forget: the stage never waits on the rollout; the futures are awaited before it ends.
        signal = workflow.get_external_workflow_handle(self.inp.rollout_id).signal(PROGRESS_SIGNAL, self.state.model_copy())
        self._outbox.append(asyncio.ensure_future(signal))

    def _cancel_requested(self) -> None:
        """A workflow cancellation request: a stop while the stage works; 'keep' once it waits for the verdict."""
        self.cancelled = True
        if not self.state.awaiting_verdict:
            self._set_stop(f"cancellation requested on {self.ref.key}")

    async def _shielded(self, activity: Awaitable[T]) -> T:
        """Run an activity to its end even if the workflow is asked to cancel (which is then noted, not obeyed)."""
        task = asyncio.ensure_future(activity)
        while True:
            try:
                return await asyncio.shield(task)
            except asyncio.CancelledError:
                if task.done():
                    return task.result()
                self._cancel_requested()

    async def _until(self, condition: Callable[[], bool], timeout: timedelta | None = None, summary: str = "") -> bool:
        """Wait for `condition` (True) or the timeout (False); a cancellation request is noted, not raised (it cuts
        a timed wait short only through the condition: stop_reason)."""
        return await until(condition, timeout, summary, on_cancel=self._cancel_requested)

    def _check_stop(self) -> None:
        if self.detail.stop_reason is not None:
            raise _Failed(f"stopped: {self.detail.stop_reason}", stopped=True)

    # -- the stage ---------------------------------------------------------------------------------
    @workflow.run
    async def run(self, inp: StageInput) -> StageState:
        if self.refusal is not None:
            raise ApplicationError(self.refusal, type=INVALID_PAYLOAD, non_retryable=True)
        st = self.state
        if inp.resume is None:
            st.started_at = workflow.now()
            self._report("deploying", tell_rollout=False)  # the rollout marked it deploying when it started it
            try:
                self.detail.previous = await self._shielded(workflow.execute_local_activity_method(
                    DeployActivities.current_version, StageOnly(stage=self.ref),
                    summary=f"read version in {self.ref.key}", **options.QUICK_LOCAL))
            except FailureError as err:
                # an ordinary activity's failure is an ActivityError; a local one's is the activity's own error;
                # a version read that fails ends the stage `failed` with its reason
                if isinstance(err, CancelledError):
                    raise
                st.reason = f"could not read the current version: {error_text(err)}"
                return await self._end("failed")
            st.version_before = st.version_now = self.detail.previous
            if self.detail.previous == inp.version:
                st.reason = f"{self.ref.key} already runs {inp.version}"
                self._report("skipped", st.reason)
                return await self._end("skipped")
            if self.detail.stop_reason is not None:
                st.reason = f"stopped before it changed anything: {self.detail.stop_reason}"
                self._report("skipped", st.reason)
                return await self._end("skipped")
        try:
            if inp.resume is None:
                await self._deploy_and_judge()
                await self._promote()
            if self.detail.soak is not None:
                await self._soak()  # may continue as new
        except _Failed as failed:
            st.reason = failed.reason
            # a stop that arrived while the stage was failing on its own (a sibling failed at the same moment)
            # does not make its own failure an ordered rollback: it still ends red, naming its own failure
            return await self._roll_back_and_end(mitigate=self.detail.stop_reason is None, ordered=failed.stopped)
        st.version_now = inp.version
        st.awaiting_verdict = workflow.info().parent is not None
        self._report("succeeded", f"now on `{inp.version}`")
        if not st.awaiting_verdict:
            return await self._end("succeeded")
        await self._until(lambda: self.conclusion is not None or self.cancelled, summary="wait for the rollout's verdict")
        st.awaiting_verdict = False
        if self.conclusion is not None and self.conclusion.action == "roll_back":
            st.reason = self.conclusion.reason or "rolled back by the rollout"
            return await self._roll_back_and_end()
        why = (self.conclusion.reason if self.conclusion is not None
               else "the rollout ended without a verdict (it was cancelled or terminated); the new version stays")
        if why:
            st.reason = f"{st.reason}; {why}" if st.reason else why
        self._report("succeeded", f"kept `{inp.version}`", tell_rollout=False)
        return await self._end("succeeded")

    async def _end(self, status: StageStatus, *, ordered: bool = False) -> StageState:
        """Close the stage: wait for its reports and background work, then succeed or fail with its state.

        `ordered`: the rollout ordered this rollback (the stage did not fail on its own); it completes."""
        st = self.state
        st.status = status
        st.ended_at = workflow.now()
        workflow.set_current_details(stage_details(st, service=self.inp.service, version=self.inp.version))
        metrics.stage_ended(workflow.metric_meter(), region=st.region, environment=st.environment, outcome=status,
                            started=st.started_at, ended=st.ended_at)
        await asyncio.gather(*self._outbox, *self._background, return_exceptions=True)
        if status == "rolled_back" and ordered:
            return st
        if status in OUTCOME_FAILURE_TYPES:
            raise ApplicationError(f"{self.ref.key} {status.replace('_', ' ')}: {st.reason}", st,
                                   type=OUTCOME_FAILURE_TYPES[status], non_retryable=True)
        return st

    async def _deploy_and_judge(self) -> None:
        inp, canary = self.inp, self.inp.canary
        self._report("deploying", f"canary `{inp.version}` and baseline `{self.detail.previous}`", tell_rollout=False)
        deploys = [
            asyncio.ensure_future(self._shielded(workflow.execute_activity_method(
                DeployActivities.deploy_baseline,
                DeployInput(stage=self.ref, version=self.detail.previous or inp.version, image=None, replicas=canary.baseline_replicas),
                summary=f"baseline {self.detail.previous} in {self.ref.key}", **options.DEPLOY))),
            asyncio.ensure_future(self._shielded(workflow.execute_activity_method(
                DeployActivities.deploy_canary,
                DeployInput(stage=self.ref, version=inp.version, image=inp.image, replicas=canary.canary_replicas),
                summary=f"canary {inp.version} in {self.ref.key}", **options.DEPLOY))),
        ]
        # let both deploys settle before acting on a failure, so a rollback never races a running deploy
        for outcome in await asyncio.gather(*deploys, return_exceptions=True):
            if isinstance(outcome, ActivityError):
                raise _Failed(f"deploy failed: {error_text(outcome)}")
            if isinstance(outcome, BaseException):
                raise outcome
        self._check_stop()
        start = await self._gather_window()
        retries = 0
        while True:
            try:
                await self._judge(start, retries)
                return
            except _Judged as failed:
                if self.inp.on_failure not in HOLDS:
                    raise
                if await self._hold(failed.reason) == "promote":
                    return
            retries += 1  # retry: a fresh window, begun after the decision; the old samples are not judged again
            start = await self._gather_window(f"retry {retries}: ")

    async def _gather_window(self, why: str = "") -> datetime:
        """Let the canary and baseline gather metrics for one analysis window; the window's start."""
        canary = self.inp.canary
        start = workflow.now()
        if canary.analysis_minutes > 0:
            self._report("analyzing", f"{why}collecting metrics for {canary.analysis_minutes:g} min")
            await self._until(lambda: self.detail.stop_reason is not None, timedelta(minutes=canary.analysis_minutes),
                              f"canary window {self.ref.key}")
            self._check_stop()
            start = await self._window_without_traffic_change(start)
        elif why:
            self._report("analyzing", f"{why}judging again")
        return start

    async def _hold(self, reason: str) -> HoldAction:
        """Hold on failure: canary and baseline keep running until the rollout decides (or stops the stage).
        Rollback raises _Failed (the stage rolls back); promote and retry are returned."""
        st, key = self.state, self.ref.key
        st.holds += 1
        self.decision = None
        st.reason = reason
        if self.inp.on_failure == "evacuate_and_hold" and self.inp.environment == "prod" and self.evacuated is None:
            self.evacuated = await self._evacuate(then="held")
            reason = st.reason
        self._report("held", f"{reason} — canary and baseline keep running until a release manager retries, "
                             "promotes or rolls back")
        await self._until(lambda: self.decision is not None or self.detail.stop_reason is not None,
                          summary=f"held on failure: {key} waits for retry, promote or rollback")
        if self.decision is None:
            raise _Failed(f"{reason}; held, then stopped: {self.detail.stop_reason}")
        d = self.decision
        self.detail.audit.append(audit_entry(d.by, f"hold-{d.action}", key, d.reason))
        if d.action == "rollback":
            raise _Failed(f"{reason}; held, then rolled back by {d.by}: {d.reason}")
        st.reason = (f"promoted from a hold by {d.by}: {d.reason} (it had failed: {reason})" if d.action == "promote"
                     else f"retried by {d.by} after: {reason}")
        if self.evacuated is not None:  # the traffic returns (health-checked) before the canary goes on
            evacuated, self.evacuated = self.evacuated, None
            await self._restore_traffic(evacuated)
            self._check_stop()
        return d.action

    async def _judge(self, start: datetime, retries: int = 0) -> None:
        """Judge the canary on the window from `start` (extending an inconclusive analysis); _Judged if it fails."""
        inp, canary = self.inp, self.inp.canary
        # sequential analysis needs a window to extend: without one (analysis_minutes 0) the judge decides once
        place = inp.place if canary.analysis_minutes > 0 else None
        look = 1
        suffix = f"-retry{retries}" if retries else ""
        while True:
            analysis_input = AnalysisInput(
                stage=self.ref, rollout_id=inp.rollout_id,
                analysis_id=f"{self.ref.region}-{self.ref.environment}-canary{suffix}",
                metrics=canary.metrics, judge=canary.judge,
                window=MetricWindow(start=start, end=workflow.now(), interval_seconds=canary.interval_seconds),
                baseline_version=self.detail.previous, canary_version=inp.version, place=place, look=look,
            )
            try:
                analysis = await self._shielded(workflow.execute_activity_method(
                    AnalysisActivities.analyze_canary, analysis_input, summary=f"judge canary {self.ref.key}"
                    + (f" (look {look})" if look > 1 else ""), **options.ANALYSIS))
            except ActivityError as err:
                raise _Judged(f"canary analysis failed: {error_text(err)}") from None
            self.state.analysis_looks = look
            decision = analysis.decision
            # bounded: the judge extends at most max_extensions times (10 at most), and never past its last look
            if decision is None or decision.action != "extend" or look >= min(decision.max_looks, MAX_ANALYSIS_LOOKS):
                break
            await self._extend(decision, canary.analysis_minutes)
            look += 1
        st = self.state
        self.detail.analysis = analysis.result
        st.verdict, st.score, st.report_url = analysis.result.verdict, analysis.result.score, analysis.report_url
        if analysis.report_url:  # drawn beside the stage's work; the verdict never waits for the picture
            self._draw(ReportInput.for_canary(analysis_input, analysis.result), f"canary report {self.ref.key}")
        if analysis.result.verdict != "pass":
            raise _Judged(f"canary judged {analysis.result.verdict}: {analysis.result.summary}")
        self._check_stop()

    async def _window_without_traffic_change(self, start: datetime) -> datetime:
        """The start of an analysis window that no traffic change of the service overlapped (docs/traffic.md).

        A window in which weights moved (an evacuation or restore ran, or a step of one was applied) holds samples
        of two regimes: it is not judged; the stage waits a fresh window, at most MAX_REWINDOWS times, then judges
        the last one and says so. Read from the truth: the record set and the traffic workflow's own state."""
        minutes = self.inp.canary.analysis_minutes
        for fresh in range(1, MAX_REWINDOWS + 2):
            facts = await traffic_facts(self.inp.service, self.inp.environment, [self.inp.region])
            moved = facts.moved_since(self.inp.region, start)  # '' without a traffic target: nothing Bifrost moves
            if not moved:
                return start
            if fresh > MAX_REWINDOWS:
                self.detail.audit.append(audit_entry("bifrost", "window-judged", self.ref.key, f"traffic still moved "
                                                     f"({moved}) after {MAX_REWINDOWS} fresh windows: the last is judged"))
                return start
            why = f"the analysis window overlapped a traffic change ({moved}): not judged; a fresh window ({fresh}/{MAX_REWINDOWS})"
            self.detail.audit.append(audit_entry("bifrost", "window-discarded", self.ref.key, why))
            self.state.extended = why
            self._report("analyzing", why)
            start = workflow.now()
            await self._until(lambda: self.detail.stop_reason is not None, timedelta(minutes=minutes),
                              f"fresh canary window {self.ref.key} ({fresh}/{MAX_REWINDOWS})")
            self._check_stop()
        return start

    async def _extend(self, decision: Decision, minutes: float) -> None:
        """Inconclusive: show why, and gather as long again as the first window (the judge then sees the whole window)."""
        self.detail.analysis = decision.result
        self.state.extended = f"analysis extended: {decision.reason}"
        self._report("analyzing", self.state.extended)
        await self._until(lambda: self.detail.stop_reason is not None, timedelta(minutes=minutes),
                          f"canary window {self.ref.key} (look {decision.look + 1})")
        self._check_stop()

    async def _promote(self) -> None:
        inp = self.inp
        if self.detail.hold:
            self._report("promoting", "holding before promotion: the rollout is paused, or a stage is held on failure")
            await self._until(lambda: not self.detail.hold or self.detail.stop_reason is not None, summary="paused before promotion")
            self._check_stop()
        soak = timedelta(hours=inp.soak_hours)
        self._report("promoting", f"promoting `{inp.version}`")
        try:
            promoted = await self._shielded(workflow.execute_activity_method(
                DeployActivities.promote,
                PromoteInput(stage=self.ref, version=inp.version, image=inp.image, cleanup=soak <= timedelta(0)),
                summary=f"promote {inp.version} in {self.ref.key}", **options.DEPLOY))
        except ActivityError as err:
            raise _Failed(f"promotion failed: {error_text(err)}") from None
        if promoted.previous_version is not None:
            self.detail.previous = promoted.previous_version
            self.state.version_before = promoted.previous_version
        self.state.version_now = inp.version
        if promoted.cleanup_error:  # promoted: the new version stays; the leftovers need a person
            self.state.reason = f"promoted, but {promoted.cleanup_error}"
        self._check_stop()
        if soak > timedelta(0):
            start = workflow.now()
            interval = min(timedelta(minutes=inp.canary.soak_check_minutes), soak)
            self.detail.soak = SoakProgress(started_at=start, ends_at=start + soak, interval=interval,
                                     max_looks=max(1, math.ceil(soak / interval)))
            self.state.soak_max_looks, self.state.soak_ends_at = self.detail.soak.max_looks, self.detail.soak.ends_at

    async def _soak(self) -> None:
        """Look at the promoted version every interval until the soak ends; alarm, stop or skip end it early."""
        assert self.detail.soak is not None
        soak, st, canary = self.detail.soak, self.state, self.inp.canary
        every = max(1, math.ceil(soak.max_looks / SOAK_REPORTS))
        while soak.looks_done < soak.max_looks:
            look = soak.looks_done + 1
            due = min(soak.started_at + soak.interval * look, soak.ends_at)
            self._report("soaking", f"look {look}/{soak.max_looks}; soak ends {soak.ends_at:%Y-%m-%d %H:%M} UTC",
                         tell_rollout=self._reported != "soaking" or look % every == 0)
            wait = wait_until(due, workflow.now())
            if wait > timedelta(0):
                await self._until(lambda: self.detail.skip_soak_reason is not None or self.detail.stop_reason is not None, wait,
                                  f"soak {self.ref.key} look {look}/{soak.max_looks}")
            self._check_stop()
            if self.detail.skip_soak_reason is not None:
                st.reason = f"soak skipped: {self.detail.skip_soak_reason}"
                break
            now = workflow.now()
            window_start = max(soak.started_at, now - timedelta(seconds=canary.interval_seconds * MAX_WINDOW_SAMPLES))
            check = SoakCheckInput(
                stage=self.ref, rollout_id=self.inp.rollout_id, metrics=canary.metrics, judge=canary.judge,
                window=MetricWindow(start=window_start, end=now, interval_seconds=canary.interval_seconds),
                baseline_version=self.detail.previous, canary_version=self.inp.version, look=look, max_looks=soak.max_looks,
                place=self.inp.place,
            )
            try:
                checked = await self._shielded(workflow.execute_activity_method(
                    AnalysisActivities.soak_check, check, summary=f"soak check {look}/{soak.max_looks} {self.ref.key}",
                    **options.ANALYSIS))
            except ActivityError as err:
                raise _Failed(f"soak check failed: {error_text(err)}") from None
            self.detail.last_look = checked.monitor
            soak.looks_done = st.soak_looks = look
            if checked.monitor.alarm:
                if checked.report_url:
                    st.report_url = checked.report_url
                    self._draw(ReportInput.for_soak_look(check, checked.monitor), f"soak report {self.ref.key} look {look}")
                raise _Failed(f"alarm during soak (look {look}/{soak.max_looks}): {'; '.join(checked.monitor.reasons)}")
            if soak.looks_done < soak.max_looks and self._history_full():
                await self._continue_as_new()
        self._check_stop()
        try:
            await self._shielded(workflow.execute_activity_method(
                DeployActivities.cleanup, StageOnly(stage=self.ref),
                summary=f"remove canary and baseline in {self.ref.key}", **options.DEPLOY))
        except ActivityError as err:  # promoted and soaked: the new version stays; the leftovers need a person
            st.reason = f"soaked, but {error_text(err)}"

    def _draw(self, report: ReportInput, summary: str) -> None:
        """Have a ReportWorkflow draw and store a report; the stage waits only until that workflow has started."""
        self._background.append(asyncio.ensure_future(start_report(report, summary)))

    def _history_full(self) -> bool:
        info = workflow.info()
        return info.get_current_history_length() >= self.inp.history_budget or info.is_continue_as_new_suggested()

    async def _continue_as_new(self) -> None:
        """Start a fresh run that goes on with the soak: same input, plus everything this run learned."""
        assert self.detail.soak is not None
        await asyncio.gather(*self._outbox, *self._background, return_exceptions=True)
        await workflow.wait_condition(workflow.all_handlers_finished)
        resume = self.detail.model_copy(update={"runs": self.detail.runs + 1})
        workflow.continue_as_new(self.inp.model_copy(update={"resume": resume}))

    async def _roll_back_and_end(self, *, mitigate: bool = False, ordered: bool | None = None) -> StageState:
        """Put the primary back on the version found, remove canary and baseline; never cancelled halfway.

        With `mitigate` (this stage failed on its own) and `on_failure: evacuate`, its region's traffic moves to
        the other regions first, and returns, step by step, once the rolled-back version passes a health check."""
        st = self.state
        st.awaiting_verdict = False
        evacuated, self.evacuated = self.evacuated, None  # evacuate_and_hold: moved away when it held
        if evacuated is None:
            evacuated = await self._evacuate() if mitigate and self._evacuates() else None
        ended = await self._roll_back()
        if evacuated is not None and ended == "rolled_back":
            await self._restore_traffic(evacuated)
        return await self._end(ended, ordered=not mitigate if ordered is None else ordered)

    async def _roll_back(self) -> StageStatus:
        st = self.state
        self._report("rolling_back", st.reason)
        try:
            rolled = await self._shielded(workflow.execute_activity_method(
                DeployActivities.rollback,
                RollbackInput(stage=self.ref, to_version=self.detail.previous, reason=st.reason),
                summary=f"roll back {self.ref.key} to {self.detail.previous}", **options.ROLLBACK))
        except ActivityError as err:
            st.reason += f"; ROLLBACK FAILED: {error_text(err)} — fix by hand, then re-run"
            st.version_now = None
            return "failed"
        st.version_now = self.detail.previous
        if rolled.cleanup_error:
            st.reason += f"; {rolled.cleanup_error}"
        return "rolled_back"

    # -- traffic: evacuate the failing region first, restore it after the rollback --------------------
    def _evacuates(self) -> bool:
        return self.inp.on_failure == "evacuate" and self.inp.environment == "prod"

    async def _traffic(self, move: EvacuationInput) -> tuple[EvacuationState | None, str]:
        """Run an evacuation or restore as a child workflow, to its end; its state (or None) and how it ended."""
        run = await run_traffic_change(move, summary=f"{move.direction} {move.region} for {self.inp.service} "
                                       f"(stage {self.ref.key})", shield=self._shielded)
        return run.state, run.line

    async def _evacuate(self, then: str = "rolled back") -> EvacuationState | None:
        """Move the region's traffic away (pre-warming the others) before the rollback: the fastest mitigation."""
        st = self.state
        self._report("evacuating", f"moving {self.inp.region}'s traffic to the other regions before the rollback")
        state, how = await self._traffic(EvacuationInput.for_stage(
            self.inp.evacuation, self.inp.canary.judge, service=self.inp.service, region=self.inp.region,
            environment=self.inp.environment, reason=f"stage {self.ref.key} failed: {st.reason}"))
        if state is not None and state.status == "evacuated":
            st.reason += f"; evacuated {self.inp.region} first (weights {state.weights_before} → {state.weights_now})"
            return state
        st.reason += f"; {how}; {then} without evacuating"
        return None

    async def _restore_traffic(self, evacuated: EvacuationState) -> None:
        """Watch the rolled-back version for a while, then move the traffic back step by step (health-checked)."""
        st, e = self.state, self.inp.evacuation
        self._report("restoring_traffic", f"checking {self.detail.previous} in {self.inp.region} before the traffic returns")
        started = workflow.now()
        await self._until(lambda: False, timedelta(minutes=e.health_check_minutes), f"health check {self.ref.key}")
        baseline_start = (st.started_at or started) - timedelta(minutes=e.health_check_minutes)
        try:
            health = await self._shielded(workflow.execute_activity_method(
                TrafficActivities.check_health,
                HealthInput(service=self.inp.service, environment=self.inp.environment,
                            regions=[RegionHealth(region=self.inp.region, metrics=self.inp.canary.metrics)],
                            baseline_window=MetricWindow(start=baseline_start, end=st.started_at or started,
                                                         interval_seconds=e.health_interval_seconds),
                            window=MetricWindow(start=started, end=workflow.now(), interval_seconds=e.health_interval_seconds),
                            judge=self.inp.canary.judge.model_copy(update={"min_samples": e.min_samples}),
                            look=1, max_looks=1),
                summary=f"health of {self.detail.previous} in {self.ref.key}", **options.ANALYSIS))
        except ActivityError as err:
            st.reason += f"; traffic left evacuated: the health check failed ({error_text(err)}); restore it with " \
                         f"`bifrost restore {self.inp.region} --service {self.inp.service}`"
            return
        if health.alarm:
            st.reason += f"; traffic left evacuated: {self.detail.previous} is not healthy ({health.summary}); restore it " \
                         f"with `bifrost restore {self.inp.region} --service {self.inp.service}` once it is"
            return
        self._report("restoring_traffic", f"{self.detail.previous} is healthy: moving the traffic back to {self.inp.region}")
        restore = evacuated.restore_input(requested_by="bifrost", reason=f"{self.detail.previous} passed its health check")
        state, how = await self._traffic(restore)
        if state is not None and state.status == "restored":
            st.reason += f"; traffic restored (weights {state.weights_now})"
        else:
            st.reason += f"; {how}; restore it with `bifrost restore {self.inp.region} --service {self.inp.service}`"
