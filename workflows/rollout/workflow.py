"""RolloutWorkflow: runs a plan wave by wave, each stage a child StageWorkflow, and rolls back on failure.

Stages that finish their work stay open until the rollout's verdict, so a rollback by scope runs on each
stage's own page. A rollout that does not reach its goal ends as a Temporal failure whose type names the
outcome (RolledBack, Rejected, Failed) and whose details are its full state; one that succeeds returns that
state; an aborted one ends Canceled, its state in the `bifrost_outcome` memo (workflows/controls/ending.py). Release
managers drive it through validated updates (approve, reject, pause, resume, abort, rollback, skip_soak,
override_window, resolve_hold) and read it through the `summary` and `status` queries and the UI's current details.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError, WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from activities.deploy import DeployActivities
    from activities.errors import error_text
    from activities.models import StageOnly
    from activities.notify import NotifyActivities
    from activities.peers import PeerActivities, PeerQuery
    from activities.policy import PolicyActivities
    from canary.config import StagePlace
    from common import metrics, notices
    from common.lock import LOCK_CLAIM_QUERY, LockClaim
    from common.types import (
        INVALID_REQUEST,
        OUTCOME_FAILURE_TYPES,
        TERMINAL,
        EnvKind,
        Notification,
        RollbackScope,
        RolloutStatus,
        StageRef,
    )
    from workflows import options
    from workflows.clock import MIN_WINDOW_WAIT, wait_until
    from workflows.controls import Controls, Stopped, check_approver
    from workflows.controls.ending import CANCEL_REASON, end_canceled, name_canceller
    from workflows.lock.workflow import GRANTED_SIGNAL, REFUSED_SIGNAL, SUPERSEDED_SIGNAL, LockAnswer, ServiceLock
    from workflows.plan import Plan, PlanError, Stage, Wave, build_plan
    from workflows.provenance import require_own_id
    from workflows.request import RolloutRequest, duration, promote_hold_floor_problem, promoting_holds
    from workflows.rollout.details import holds_at, rollout_details, rollout_search, rollout_summary, waiting_window
    from workflows.rollout.models import RolloutPhase, RolloutState, RolloutSummary
    from workflows.rollout.rollback import stages_to_roll_back
    from workflows.rollout.updates import (
        Abort,
        Ack,
        Approve,
        OverrideWindow,
        Pause,
        Reject,
        ResolveHold,
        Resume,
        Rollback,
        SkipSoak,
        refused,
    )
    from workflows.stage.models import (
        HoldAction,
        HoldDecision,
        StageConclusion,
        StageDetail,
        StageInput,
        StageOrders,
        StageState,
    )
    from workflows.stage.workflow import PROGRESS_SIGNAL, STAGE_ORDERS_QUERY, StageWorkflow
    from workflows.traffic_gate import traffic_facts
    from workflows.windows import next_open


# A stage held on failure (on_failure: hold) puts the rollout under a `failure` hold: the other stages are told to
# hold before promotion, the hold's timeout takes the request's hold.on_timeout.
QUEUED_NOTICE_AFTER = timedelta(seconds=10)  # a lock not granted by then: another rollout holds it
# A rollout reset from the Web UI while it ran: the server (1.27+) keeps the previous run's stages running, with
# no parent to conclude them, and the new run could not start them again (WorkflowAlreadyStarted). It asks the
# orphan to cancel (what the parent-close policy would have done: a working stage stops and rolls back, one
# waiting for its verdict keeps the version) and starts the stage once the orphan has closed.
PREVIOUS_STAGE_WAIT = timedelta(seconds=2)
# A resubmitted rollout resumes from the failed stage: a wave whose every stage already runs the version (read at
# the start) changes nothing, so its gates and windows are not asked again (its stages end `skipped`).
# A cancellation request (the Web UI's Request Cancellation, `temporal workflow cancel`) is attributed in the
# reason and the audit to the identity the request carried, read from the run's history by an activity.
PREVIOUS_STAGE_TRIES = 60


@dataclass(frozen=True)
class Stop:
    """Why the rollout must stop early: the final status, the reason, and a rollback scope if one was chosen."""

    status: RolloutPhase
    reason: str
    scope: RollbackScope | None = None


async def hold_floor_problem(request: RolloutRequest) -> str | None:
    """Why the request's holds may not promote on timeout this soon, by the floor in the worker's own targets
    file (an activity: a hand-started run chooses its input, not the worker's file). Only a request whose holds
    promote on timeout asks, so every other rollout's commands are as they were."""
    if not promoting_holds(request):
        return None
    try:
        floor: float = await workflow.execute_activity_method(
            PolicyActivities.promote_hold_floor, summary="the platform's floor on hold.timeout_minutes", **options.QUICK)
    except ActivityError as err:
        return (f"hold.on_timeout: promote needs the platform's floor on hold.timeout_minutes, which could not be "
                f"read ({error_text(err)})")
    return promote_hold_floor_problem(request, floor)


@workflow.defn(failure_exception_types=options.FAIL_ON_BUGS)
class RolloutWorkflow:
    """One rollout of one service version across all planned stages."""

    @workflow.init
    def __init__(self, request: RolloutRequest) -> None:
        self.req = request
        info = workflow.info()
        self.state = RolloutState(rollout_id=info.workflow_id, service=request.service, version=request.version)
        self.plan: Plan | None = None
        self.controls: Controls[Stop] = Controls(
            self.state, noun="rollout", terminal=TERMINAL, stop_word=lambda stop: stop.status,
            on_cancel=lambda: self._halt(Stop("aborted", CANCEL_REASON)))
        self.children: dict[str, workflow.ChildWorkflowHandle[Any, StageState]] = {}
        self.collected: set[str] = set()  # stages whose workflow has closed and whose end is recorded
        self.launched: set[str] = set()  # stages asked to start: their reports count before the start is confirmed
        self.lock = ServiceLock(info.workflow_id, request.service, request.version, request.on_conflict)
        self._outbox: list[asyncio.Future[Any]] = []
        # what the rollout told its stages (the `stage_orders` query): a stage obeys a signal only as far as this says
        self.orders = StageOrders()  # its `hold` is the pause hold's, set when asked
        self._progress_pokes: dict[str, list[StageState]] = {}
        self._confirming: dict[str, asyncio.Lock] = {}
        self._metered: tuple[RolloutStatus, datetime] | None = None  # the status last counted (metrics), and since when
        self._window_noticed: set[str] = set()  # the closed windows people were last told about
        self._watchers: list[asyncio.Task[None]] = []  # notices that wait for a hold to last (queued, reminders)
        self._held: dict[str, datetime] = {}  # stages held on failure -> when their hold times out
        self._holds_seen: set[tuple[str, int]] = set()  # (stage, n-th hold) the rollout has placed a hold for

    # -- main flow ---------------------------------------------------------------------------------
    @workflow.run
    async def run(self, request: RolloutRequest) -> RolloutState:
        require_own_id(workflow.info().workflow_id, request.workflow_id, what=f"a rollout of {request.service} {request.version}",
                       suffixed=True)
        self.state.started_at = workflow.now()
        try:
            self.plan = build_plan(request, now=workflow.now())
        except PlanError as err:
            self._enter("failed", reason=f"invalid plan: {err}")
            raise ApplicationError(f"invalid plan: {err}", self.state, type=INVALID_REQUEST, non_retryable=True) from None
        problem = await hold_floor_problem(request)
        if problem is not None:
            self._enter("failed", reason=f"invalid request: {problem}")
            raise ApplicationError(f"invalid request: {problem}", self.state, type=INVALID_REQUEST, non_retryable=True)
        self.state.waves = len(self.plan.waves)
        self.state.stages = [StageState.of(s.region, s.environment, w.index) for w in self.plan.waves for s in w.stages]
        self._audit(request.requested_by, "submit", None, f"{request.service} {request.version}")
        try:
            await self._execute(self.plan)
        except Stopped:
            pass
        except workflow.NondeterminismError:
            raise  # a worker with the right code can still resume this run
        except asyncio.CancelledError:
            self._halt(Stop("aborted", CANCEL_REASON))
        except Exception as err:  # a bug must not wedge the rollout or hold the service's lock
            workflow.logger.exception("rollout failed unexpectedly")
            self._halt(Stop("failed", f"Bifrost internal error ({type(err).__name__}: {err}); "
                                      "stages were stopped and rolled back by scope"))
        try:
            await self._conclude()
        except Exception:  # not `finally`: a workflow evicted from the worker's cache must not signal anything
            await self.lock.release()
            raise
        await self.lock.release()
        self._notify(f"rollout_{self.state.status}", self.state.reason)
        self.state.ended_at = workflow.now()
        self._publish()
        await asyncio.gather(*self._outbox, return_exceptions=True)
        await workflow.wait_condition(workflow.all_handlers_finished)
        if self.state.status == "aborted":
            await end_canceled(self.state, "rollout")  # Canceled, its state in the memo (returns if it cannot)
        if self.state.status != "succeeded":
            raise ApplicationError(f"{self.state.status.replace('_', ' ')}: {self.state.reason}", self.state,
                                   type=OUTCOME_FAILURE_TYPES[self.state.status], non_retryable=True)
        return self.state

    async def _execute(self, plan: Plan) -> None:
        self.state.phase = "running"
        self.controls.hold("lock", releases=f"the {self.req.service} lock (another version may be rolling out)")
        self._publish()
        self._background(self._notice_if_queued())
        acquired = await self.lock.acquire(give_up=lambda: self.controls.stopping, answered=self._lock_answered)
        self.controls.release("lock")
        if not acquired:
            raise Stopped()
        self._publish()
        self._notify("rollout_started", f"rolling out across {len(plan.waves)} waves")
        await self._inventory(plan)
        for wave in plan.waves:
            self.state.current_wave = wave.index
            self.state.current_stages = [s.key for s in wave.stages]  # what a gate or window holds back
            await self._before_wave(wave)
            await self._run_wave(wave)
            if self.state.failed_stage is not None or self.controls.stopping:
                return

    @property
    def stop(self) -> Stop | None:
        return self.controls.stop

    def _halt(self, stop: Stop) -> None:
        self.controls.halt(stop)

    def _raise_if_stopped(self) -> None:
        self.controls.raise_if_stopped()

    async def _until(self, condition: Callable[[], bool], timeout: timedelta | None = None, summary: str | None = None) -> bool:
        """Wait without being cut short by a cancellation request (it becomes an abort): used where the rollout
        must finish what it started (stopping stages, rollbacks, reports)."""
        return await self.controls.until(condition, timeout, summary)

    # -- messages from stages and the lock ---------------------------------------------------------
    @workflow.signal(name=PROGRESS_SIGNAL, description="Internal: a stage says its status changed; the rollout takes "
                                                        "the stage's own answer to its progress query, not the report.")
    async def stage_progress(self, report: StageState) -> None:
        key = report.key
        if self.state.stage(key) is None or key not in self.launched:
            self._ignored(PROGRESS_SIGNAL, None, f"this rollout has started no stage {key[:80]!r}")
            return
        if key in self.collected:
            self._ignored(PROGRESS_SIGNAL, key, f"{key} has ended; its result is what counts")
            return
        self._progress_pokes.setdefault(key, []).append(report)
        async with self._confirming.setdefault(key, asyncio.Lock()):  # one question at a time per stage
            pokes = self._progress_pokes.pop(key, [])
            if not pokes:
                return  # answered by the question before
            detail, why = await self._stage_progress(key)
            if key in self.collected:
                return  # it ended meanwhile: its result is what counts
            truth = detail.state if detail is not None else None
            for report in pokes:
                problem = why if truth is None else _does_not_fit(report, truth)
                if problem:
                    self._audit("bifrost", f"ignored {PROGRESS_SIGNAL}", key, problem)
            if truth is not None:
                _take(self._row(key), truth)
                if truth.status == "held":
                    self._stage_held(key)
            self._publish()

    async def _stage_progress(self, key: str) -> tuple[StageDetail | None, str]:
        """The stage's own account (its `progress` query, asked by an activity), or None and why not."""
        stage = self._child_id(key)
        try:
            answer = await workflow.execute_activity_method(
                PeerActivities.query_workflow, PeerQuery(workflow_id=stage, query="progress"),
                summary=f"confirm with {stage}", **options.CONFIRM)
        except ActivityError as err:
            return None, f"the stage could not be asked ({error_text(err)})"
        if not answer.found or answer.error is not None:
            return None, "the stage does not exist" if not answer.found else f"the stage did not answer ({answer.error})"
        try:
            return StageDetail.model_validate(answer.answer), ""
        except ValidationError:
            return None, "the stage answered with something else than its progress"

    @workflow.signal(name=GRANTED_SIGNAL, description="Internal: the service lock is ours (confirmed with the lock).")
    async def lock_granted(self, service: str) -> None:
        why = await self.lock.confirm_grant()
        if why:
            self._ignored(GRANTED_SIGNAL, None, why)
        else:
            self._audit("bifrost", "lock-granted", None, f"{self.req.service} lock acquired")

    def _lock_answered(self, answer: LockAnswer) -> None:
        """The rollout's own re-check found the lock's answer in the lock's state (its signal was lost or unconfirmed)."""
        kind, detail = answer
        found = "found by re-checking the lock; its signal never arrived or could not be confirmed"
        if kind == "granted":
            self._audit("bifrost", "lock-granted", None, f"{self.req.service} lock acquired ({found})")
        elif kind == "refused":
            self._halt(Stop("rejected", f"not started: {detail} (on_conflict: reject)"))
        elif self.stop is None:
            self._audit("bifrost", "superseded", None, f"by version {detail} ({found})")
            self._halt(Stop("aborted", f"superseded by {self.req.service} {detail}"))

    @workflow.signal(name=REFUSED_SIGNAL, description="Internal: the service lock was refused (policy 'reject'; confirmed with the lock).")
    async def lock_refused(self, reason: str) -> None:
        confirmed, why = await self.lock.confirm_refusal()
        if confirmed is None:
            self._ignored(REFUSED_SIGNAL, None, why)
        else:
            self._halt(Stop("rejected", f"not started: {confirmed} (on_conflict: reject)"))

    @workflow.signal(name=SUPERSEDED_SIGNAL, description="Internal: a newer version superseded this rollout (policy 'supersede'; confirmed with the lock).")
    async def superseded(self, version: str) -> None:
        if self.stop is not None or self.controls.finished:
            self._ignored(SUPERSEDED_SIGNAL, None, f"the rollout is already {self.stop.status if self.stop else self.state.status}")
            return
        confirmed, why = await self.lock.confirm_supersession()
        if confirmed is None:
            self._ignored(SUPERSEDED_SIGNAL, None, why)
        elif self.stop is None:
            self._audit("bifrost", "superseded", None, f"by version {confirmed}")
            self._halt(Stop("aborted", f"superseded by {self.req.service} {confirmed}"))

    def _ignored(self, signal: str, target: str | None, why: str) -> None:
        """An internal signal that does not fit what its supposed sender says: ignored, one audit line."""
        self._audit("bifrost", f"ignored {signal}", target, why)
        self._publish()

    def _notify(self, event: str, text: str, stage: str | None = None) -> None:
        """Tell humans (chat webhooks) without waiting: a notification never delays or fails the rollout."""
        self._outbox.append(asyncio.ensure_future(workflow.execute_activity_method(
            NotifyActivities.notify,
            Notification(rollout_id=self.state.rollout_id, service=self.req.service, version=self.req.version,
                         event=event, text=text, stage=stage),
            summary=f"notify {event}", **options.NOTIFY,
        )))

    # -- telling people when they are needed (common/notices.py builds each notice) ------------------
    def _about(self) -> dict[str, str]:
        return {"rollout_id": self.state.rollout_id, "service": self.req.service, "version": self.req.version}

    def _tell(self, n: Notification) -> None:
        """Send a notice without waiting: it never delays or fails the rollout."""
        self._outbox.append(asyncio.ensure_future(workflow.execute_activity_method(
            NotifyActivities.notify, n, summary=f"notify {n.event}", **options.NOTIFY)))

    def _background(self, watcher: Any) -> None:
        self._watchers.append(asyncio.ensure_future(watcher))

    async def _notice_if_queued(self) -> None:
        """Tell people the rollout waits behind another one, if the lock is not granted soon."""
        try:
            await workflow.wait_condition(lambda: self.controls.held("lock") is None or self.stop is not None,
                                          timeout=QUEUED_NOTICE_AFTER, timeout_summary="notice if still queued")
        except TimeoutError:
            self._tell(notices.queued(**self._about()))

    async def _notice_approval(self, wave: Wave, gates: list[str], times_out_at: datetime) -> None:
        """approval_pending now, then a bounded number of reminders while the same gates still wait."""
        a = self.req.approvals
        stages = [s.key for s in wave.stages]

        def notice(reminder: int) -> Notification:
            left = max(a.max_reminders - reminder, 0) if a.remind_every_minutes else None
            return notices.approval_pending(**self._about(), wave=wave.index, gates=gates, stages=stages,
                                            approvers=list(a.approvers), times_out_at=times_out_at,
                                            reminder=reminder, reminders_left=left)

        def answered() -> bool:
            return self.state.awaiting_wave != wave.index or not self.state.pending_approvals or self.stop is not None

        self._tell(notice(0))
        if not a.remind_every_minutes:
            return
        for reminder in range(1, a.max_reminders + 1):
            every = timedelta(minutes=a.remind_every_minutes)
            if times_out_at - workflow.now() <= every:
                return  # the gate times out first: its rejection is the next thing people hear
            try:
                await workflow.wait_condition(answered, timeout=every, timeout_summary=f"approval reminder {reminder}")
                return
            except TimeoutError:
                if answered():
                    return
                self._tell(notice(reminder))

    # -- a stage held on failure (on_failure: hold) ----------------------------------------------------
    def _stages_hold(self) -> bool:
        """Whether stages must hold before promotion: the rollout is paused, or a stage is held on failure."""
        return self.controls.paused is not None or self.controls.held("failure") is not None

    def _tell_stages_hold(self) -> None:
        """Tell every running stage whether to hold before promotion (each confirms with `stage_orders`)."""
        hold = self._stages_hold()
        for key, h in self.children.items():
            if not h.done():
                self._signal_stage(key, StageWorkflow.set_hold, hold)

    def _place_failure_hold(self) -> None:
        """The `failure` hold over the stages held now (released when none is)."""
        if not self._held:
            self.controls.release("failure")
            return
        keys = sorted(self._held)
        rows = [self._row(k) for k in keys]
        h = self.controls.held("failure")
        since = h.since if h is not None else workflow.now()
        who = ", ".join(self.req.approvals.approvers) or "anyone who may send updates"
        self.controls.hold("failure", releases=f"resolve_hold on {', '.join(keys)}: retry, promote or rollback "
                           f"(may decide: {who}; otherwise {self.req.hold.on_timeout} when it times out)",
                           why="; ".join(f"{r.key}: {r.reason}" for r in rows), targets=keys,
                           wave=rows[0].wave, until=min(self._held.values()))
        held = self.controls.held("failure")
        assert held is not None
        held.since = since

    def _stage_held(self, key: str) -> None:
        """A stage says (confirmed by its own answer) it holds on failure: hold the rollout, tell people, time it."""
        row = self._row(key)
        if (key, row.holds) in self._holds_seen or key in self.orders.stop:
            return
        self._holds_seen.add((key, row.holds))
        timeout = timedelta(minutes=self.req.hold.timeout_minutes)
        self._held[key] = workflow.now() + timeout
        self._place_failure_hold()
        self._audit("bifrost", "hold", key, row.reason)
        self._tell_stages_hold()
        self._background(self._hold_times_out(key, row.holds, timeout))
        self._tell(notices.held(**self._about(), stage=key, wave=row.wave, reason=row.reason,
                                approvers=list(self.req.approvals.approvers), times_out_at=self._held[key],
                                on_timeout=self.req.hold.on_timeout))

    def _unhold(self, key: str) -> None:
        """Stage `key` no longer holds on failure (decided, stopped or ended)."""
        if self._held.pop(key, None) is not None:
            self._place_failure_hold()
            if self.controls.held("failure") is None:
                self._tell_stages_hold()

    def _resolve(self, key: str, action: HoldAction, by: str, reason: str) -> None:
        """Record the decision on stage `key`'s hold (what the stage confirms against), then tell the stage."""
        decision = HoldDecision(hold=self._row(key).holds, action=action, by=by, reason=reason)
        self.orders.resolve[key] = decision
        self._audit(by, f"hold-{action}", key, reason)
        self._unhold(key)
        self._signal_stage(key, StageWorkflow.resolve, decision)
        self._publish()

    async def _hold_times_out(self, key: str, hold: int, timeout: timedelta) -> None:
        """The hold of stage `key` takes the request's default action (hold.on_timeout) if nobody decides in time."""
        def over() -> bool:
            decided = self.orders.resolve.get(key)
            return (decided is not None and decided.hold >= hold) or key not in self._held or self.stop is not None

        try:
            await workflow.wait_condition(over, timeout=timeout, timeout_summary=f"hold of {key} times out")
        except TimeoutError:
            if not over():
                action = self.req.hold.on_timeout
                minutes = self.req.hold.timeout_minutes
                why = f"no decision within {minutes:g} min: the request's hold.on_timeout ({action})"
                if action == "promote":
                    why = self._failed_promotion(key, minutes, why)
                self._resolve(key, action, "bifrost", why)

    def _failed_promotion(self, key: str, minutes: float, why: str) -> str:
        """A hold that times out into promote ships a canary judged to fail: say so in the audit, and tell people
        at once as urgent."""
        row = self._row(key)
        score = f"{row.score:g}" if row.score is not None else "none"
        line = (f"promoted a FAILED canary (score {score}, verdict {row.verdict or 'none'}) because the hold timed out "
                f"after {duration(minutes)}; {why}")
        self._tell(notices.promoted_on_timeout(**self._about(), stage=key, wave=row.wave, text=line))
        return line

    def _signal_stage(self, key: str, signal: Any, arg: Any) -> None:
        """Signal a stage by id (it may have continued as new) without waiting for the delivery."""
        handle = workflow.get_external_workflow_handle(self._child_id(key))
        self._outbox.append(asyncio.ensure_future(handle.signal(signal, arg)))

    def _order_conclusion(self, key: str, conclusion: StageConclusion) -> None:
        """Record the verdict (what the stage confirms against), then tell the stage."""
        self.orders.conclude.setdefault(key, conclusion)
        self._signal_stage(key, StageWorkflow.conclude, conclusion)

    def _child_id(self, key: str) -> str:
        return f"{self.state.rollout_id}/{key}"

    def _ref(self, s: Stage) -> StageRef:
        return StageRef(service=self.req.service, region=s.region, environment=s.environment)

    # -- before and during waves -------------------------------------------------------------------
    async def _inventory(self, plan: Plan) -> None:
        """Record which version every stage runs before anything changes."""

        async def read(s: Stage) -> None:
            v = await workflow.execute_local_activity_method(
                DeployActivities.current_version, StageOnly(stage=self._ref(s)),
                summary=f"read version in {s.key}", **options.QUICK_LOCAL,
            )
            st = self.state.stage(s.key)
            assert st is not None
            st.version_before = st.version_now = v

        outcomes = await asyncio.gather(*(read(s) for s in plan.stages()), return_exceptions=True)
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        if errors:
            self._halt(Stop("failed", f"nothing was deployed: could not read the current versions: {error_text(errors[0])}",
                            "stage"))
            raise Stopped()

    async def _before_wave(self, wave: Wave) -> None:
        """Safe point: honour pause, approval gates and deployment windows before a wave starts."""
        await self._wait_unpaused(f"wave {wave.index}")
        if self._already_done(wave):
            self._audit("bifrost", "wave-already-done", f"wave-{wave.index}",
                        f"every stage already runs {self.req.version}: no gate or window to wait for")
            return
        gates = self._gates_for(wave)
        pending = [g for g in gates if g not in self.state.approved]
        if pending:
            self.controls.hold("approval", releases=f"approval of wave {wave.index} (gates: {', '.join(pending)})",
                               targets=[s.key for s in wave.stages], wave=wave.index, gates=pending)
            self._publish()
            hours = self.req.approvals.timeout_hours
            self._background(self._notice_approval(wave, pending, workflow.now() + timedelta(hours=hours)))
            try:
                await workflow.wait_condition(
                    lambda: self.controls.held("approval") is None or self.stop is not None,
                    timeout=timedelta(hours=hours), timeout_summary=f"approval timeout for wave {wave.index}",
                )
            except TimeoutError:
                names = ", ".join(self.state.pending_approvals)
                self._audit("bifrost", "approval-timeout", f"wave-{wave.index}", f"no answer within {hours:g} h")
                self._halt(Stop("rejected", f"approval of wave {wave.index} ({names}) timed out after {hours:g} h"))
            self.controls.release("approval")
            self._raise_if_stopped()
            self._publish()
            await self._wait_unpaused(f"wave {wave.index}")
        await self._wait_windows(wave)
        while await self._wait_traffic(wave):  # it held: a deployment window may have closed meanwhile
            await self._wait_windows(wave)

    def _already_done(self, wave: Wave) -> bool:
        """Every stage of the wave ran the new version when the rollout read them (a resubmission after a failure)."""
        rows = [self.state.stage(s.key) for s in wave.stages]
        return all(st is not None and st.version_before == self.req.version for st in rows)

    def _gates_for(self, wave: Wave) -> list[str]:
        keys = {s.key for s in wave.stages}
        return [g.key for g in self.req.approvals.gates if g.wave == wave.index or (g.stage in keys)]

    async def _wait_unpaused(self, where: str) -> None:
        def held() -> None:
            self._publish()
            p = self.controls.paused
            assert p is not None
            self._tell(notices.paused(**self._about(), by=p.by, reason=p.why, where=where))

        if await self.controls.wait_unpaused(where, held):
            self._publish()

    async def _wait_windows(self, wave: Wave) -> None:
        regions = {r.name: r for r in self.req.regions}
        while True:
            now = workflow.now()
            closed: dict[str, datetime | None] = {}
            for s in wave.stages:
                if s.key in self.state.window_overrides:
                    continue
                opens = next_open(regions[s.region], now)
                if opens != now:
                    closed[s.key] = opens
            if not closed:
                return
            known = [t for t in closed.values() if t is not None]
            until = min(known) if known else None
            when = f"{until:%Y-%m-%d %H:%M} UTC" if until is not None else "never (freeze dates cover 400 days)"
            self.controls.hold("window", releases=f"deployment window of {', '.join(sorted(closed))} (opens {when})",
                               targets=sorted(closed))
            self._publish()
            if set(closed) != self._window_noticed:
                self._window_noticed = set(closed)
                self._tell(notices.window_closed(**self._about(), wave=wave.index, stages=sorted(closed), opens_at=until))
            overrides = len(self.state.window_overrides)
            try:
                await workflow.wait_condition(
                    lambda n=overrides: len(self.state.window_overrides) != n or self.stop is not None,  # type: ignore[misc]
                    timeout=wait_until(until, now, at_least=MIN_WINDOW_WAIT) if until is not None else None,
                    timeout_summary=f"window opens for {', '.join(sorted(closed))}",
                )
            except TimeoutError:
                pass
            self.controls.release("window")  # placed again below while a window is still closed
            self._raise_if_stopped()
            await self._wait_unpaused(f"wave {wave.index}")
            self._publish()

    async def _wait_traffic(self, wave: Wave) -> bool:
        """Hold the wave while a region it deploys to has its traffic evacuated or moving: a canary there would be
        judged on no users, or on two regimes (workflows/traffic_gate.py; read from the truth, never a message).
        True if it held."""
        regions: dict[EnvKind, set[str]] = {}
        for s in wave.stages:
            regions.setdefault(s.environment, set()).add(s.region)
        while True:
            blocked: dict[str, str] = {}
            for env, names in sorted(regions.items()):
                facts = await traffic_facts(self.req.service, env, sorted(names))
                blocked.update({s.key: why for s in wave.stages if s.environment == env and (why := facts.why_not(s.region))})
            held = self.controls.held("traffic")
            if not blocked:
                if held is not None:
                    self.controls.release("traffic")
                    self._audit("bifrost", "traffic-back", f"wave-{wave.index}", "its regions serve again: the wave goes on")
                    self._publish()
                return held is not None
            releases = "traffic back: " + "; ".join(dict.fromkeys(blocked[k] for k in sorted(blocked)))
            if held is None or held.releases != releases:
                if held is None:
                    self._audit("bifrost", "traffic-hold", f"wave-{wave.index}", releases)
                self.controls.hold("traffic", releases=releases, targets=sorted(blocked), at=f"before wave {wave.index}")
                self._publish()
            try:
                await workflow.wait_condition(lambda: self.stop is not None,
                                              timeout=timedelta(seconds=self.req.traffic_recheck_seconds),
                                              timeout_summary=f"read the traffic of wave {wave.index} again")
            except TimeoutError:
                pass
            self._raise_if_stopped()
            await self._wait_unpaused(f"wave {wave.index}")

    def _place(self, key: str) -> StagePlace:
        """Stage `key`'s place in the plan's order: the judge splits the rollout's error budget by it."""
        order = [st.key for st in self.state.stages]
        return StagePlace(index=order.index(key), stages=len(order))

    async def _run_wave(self, wave: Wave) -> None:
        """Start every stage of the wave; wait until each has finished its work or ended; on the first
        failure or a stop, stop the stages still working (they roll themselves back)."""
        assert self.plan is not None
        keys = [s.key for s in wave.stages]
        regions = {r.name: r for r in self.req.regions}
        for s in wave.stages:
            st = self.state.stage(s.key)
            assert st is not None
            st.status = "deploying"
            self.launched.add(s.key)
            self.children[s.key] = await self._start_stage(
                s.key,
                StageInput(
                    rollout_id=self.state.rollout_id, service=self.req.service, version=self.req.version,
                    image=self.req.image, region=s.region, environment=s.environment, wave=wave.index,
                    canary=self.req.canary, soak_hours=self.req.soak.hours(s.environment),
                    on_failure=regions[s.region].on_failure, evacuation=self.req.evacuation,
                    requested_by=self.req.requested_by, place=self._place(s.key),
                ),
                f"{self.req.service} {self.req.version} in {s.key} (wave {wave.index})",
            )
            if self.controls.paused is not None:
                self._signal_stage(s.key, StageWorkflow.set_hold, True)
        self.state.current_stages = list(keys)
        self._publish()
        await self._until(lambda: self._settled(keys) or self._wave_failed(keys) or self.stop is not None)
        self._collect(keys)
        if not self._settled(keys):
            why = (self.stop.reason if self.stop is not None
                   else f"{self.state.failed_stage} failed" if self.state.failed_stage else "the rollout stopped")
            self._stop_working(keys, why)
            await self._until(lambda: self._settled(keys))
            self._collect(keys)

    async def _start_stage(self, key: str, inp: StageInput, summary: str) -> workflow.ChildWorkflowHandle[Any, StageState]:
        """Start stage `key`; after a reset, first let the previous run's workflow of the stage close."""
        for attempt in range(1, PREVIOUS_STAGE_TRIES + 1):
            try:
                return await workflow.start_child_workflow(
                    StageWorkflow.run, inp, id=self._child_id(key), task_queue=workflow.info().task_queue,
                    parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL, static_summary=summary,
                )
            except WorkflowAlreadyStartedError:
                if attempt == PREVIOUS_STAGE_TRIES:
                    raise
                if attempt == 1:
                    self._audit("bifrost", "cancel-orphaned-stage", key, "its workflow from a previous run of this "
                                "rollout (before a reset) still runs; asked to cancel")
                    await workflow.get_external_workflow_handle(self._child_id(key)).cancel()
                await workflow.sleep(PREVIOUS_STAGE_WAIT, summary=f"{key}: its workflow from a previous run is still ending")
        raise AssertionError("unreachable")

    def _settled(self, keys: list[str]) -> bool:
        """Every stage has either ended (its workflow closed) or finished its work and waits for the verdict."""
        return all(self.children[k].done() or self._row(k).awaiting_verdict for k in keys)

    def _wave_failed(self, keys: list[str]) -> bool:
        self._collect(keys)
        return self.state.failed_stage is not None

    def _row(self, key: str) -> StageState:
        st = self.state.stage(key)
        assert st is not None
        return st

    def _stop_working(self, keys: list[str], why: str) -> None:
        for k in keys:
            if not self.children[k].done() and not self._row(k).awaiting_verdict:
                self.orders.stop.setdefault(k, why)
                self._signal_stage(k, StageWorkflow.stop, why)
                self._unhold(k)  # a stage held on failure and stopped rolls back: nothing to decide any more

    def _collect(self, keys: list[str]) -> None:
        """Record the end of every stage whose workflow has closed: its own account of what it did."""
        for key in keys:
            h = self.children.get(key)
            if h is None or not h.done() or key in self.collected:
                continue
            self.collected.add(key)
            self._unhold(key)
            st = self._row(key)
            exc = h.exception()
            if exc is None:
                _take(st, h.result())
            else:
                report = _failure_state(exc)
                if report is not None:
                    _take(st, report)
                else:  # the stage workflow itself broke: its version is unknown
                    st.status, st.version_now = "failed", None
                    st.reason = f"stage workflow failed: {error_text(exc)}"
            st.awaiting_verdict = False
            if st.status == "failed":
                self._audit("bifrost", "stage-failed", key, st.reason)
            if st.status in ("rolled_back", "failed") and self.state.failed_stage is None and self.stop is None:
                self.state.failed_stage = key
            self._notify(f"stage_{st.status}", st.reason or f"{key} now on {st.version_now}", stage=key)

    # -- the end -----------------------------------------------------------------------------------
    async def _conclude(self) -> None:
        """Settle every stage, then keep them all (success) or roll back by scope, each on its own page."""
        started = list(self.children)
        await self._name_canceller()
        if not self._settled(started):
            self._stop_working(started, self.stop.reason if self.stop else "the rollout stopped")
            await self._until(lambda: self._settled(started))
            await self._name_canceller()  # a cancellation requested while the stages settled
        self._collect(started)
        if self.state.failed_stage is None and self.stop is None:
            await self._keep(started, "")
            self._enter("succeeded", reason="every stage succeeded")
            return
        stop = self.stop or Stop("rolled_back", f"{self.state.failed_stage}: {self._row(self.state.failed_stage or '').reason}")
        scope = stop.scope or self.req.rollback_scope
        self._enter("rolling_back", reason=stop.reason)
        targets = [st.key for st in stages_to_roll_back(self.state.stages, scope) if st.key in self.children]
        await self._keep([k for k in started if k not in targets], f"kept: outside rollback scope {scope}")
        for key in targets:  # one at a time, latest wave first
            self.state.current_stages = [key]
            self._enter("rolling_back")
            self._audit("bifrost", "roll-back-stage", key, f"scope {scope}: {stop.reason}")
            self._order_conclusion(key, StageConclusion(
                action="roll_back", reason=f"rolled back by the rollout (scope {scope}): {stop.reason}"))
            await self._until(lambda k=key: self.children[k].done())  # type: ignore[misc]
            self._collect([key])
        status, reason = stop.status, stop.reason
        if any(s.status == "failed" for s in self.state.stages):
            status, reason = "failed", reason + " — some stages could not be rolled back; see their reasons"
        self.state.current_stages = []
        self._enter(status, reason=reason)

    async def _name_canceller(self) -> None:
        """If a cancellation request stops the rollout, name who sent it: in the reason and the audit trail."""
        stop = self.stop
        if stop is None or stop.reason != CANCEL_REASON:
            return
        self.controls.stop = Stop("aborted", await name_canceller(self.controls))
        self._publish()

    async def _keep(self, keys: list[str], reason: str) -> None:
        """Tell stages that finished their work to keep the new version, and record how they end."""
        waiting = [k for k in keys if not self.children[k].done()]
        for k in waiting:
            self._order_conclusion(k, StageConclusion(action="keep", reason=reason))
        await self._until(lambda: all(self.children[k].done() for k in waiting))
        self._collect(waiting)

    # -- state, details, search attributes -------------------------------------------------------
    def _audit(self, who: str, action: str, target: str | None, detail: str = "") -> None:
        self.controls.audit(who, action, target, detail)

    def _enter(self, phase: RolloutPhase, *, reason: str | None = None) -> None:
        """A new phase (and why), then everything derived from it is published."""
        if reason is not None:
            self.state.reason = reason
        if phase in TERMINAL:
            self.state.current_stages = []
        self.controls.enter(phase)
        self._publish()

    def _publish(self) -> None:
        """Every change: the search attributes, the UI's current details and the metrics, all from the state."""
        status = self.state.status
        before, since = self._metered or (None, None)
        if status != before:
            metrics.rollout_status_changed(workflow.metric_meter(), service=self.req.service, before=before, after=status,
                                           since=since, now=workflow.now())
            self._metered = (status, workflow.now())
        self.controls.publish(rollout_search(self.state, self.req.requested_by),
                              rollout_details(self.state, self.plan, soaking=self._soaking()))

    def _soaking(self) -> list[str]:
        """Running stages whose last reported status is the soak."""
        return sorted(st.key for st in self.state.stages
                      if st.status == "soaking" and st.key in self.children and not self.children[st.key].done())

    # -- queries -----------------------------------------------------------------------------------
    @workflow.query(description="At a glance: status, wave, each stage's status and version, what the rollout waits for.")
    def summary(self) -> RolloutSummary:
        return rollout_summary(self.state)

    @workflow.query(description="Everything: per-stage state and versions, verdicts and report links, approvals, pause, audit trail.")
    def status(self) -> RolloutState:
        return self.state

    @workflow.query(name=STAGE_ORDERS_QUERY, description="Internal: what the rollout told its stages (hold, stop, skip a "
                                                         "soak, keep or roll back); a stage obeys a signal only as far as this says.")
    def stage_orders(self) -> StageOrders:
        return self.orders.model_copy(update={"hold": self._stages_hold()})

    @workflow.query(name=LOCK_CLAIM_QUERY, description="Internal: this rollout's service-lock request and where it stands "
                                                       "(the lock confirms acquire and release signals against it).")
    def lock_claim(self) -> LockClaim:
        return self.lock.claim()

    # -- updates -----------------------------------------------------------------------------------
    def _check_running(self) -> None:
        self.controls.check_running()

    def _check_approver(self, who: str, field: str) -> None:
        check_approver(who, self.req.approvals.approvers, field=field, source="approvals.approvers in the request")

    def _gate_wave(self, stage: str | None, wave: int | None) -> int:
        """The wave an approval names, directly or through one of its stages; it must be the one waiting."""
        waiting = self.state.awaiting_wave
        if waiting is None:
            raise refused("no approval is pending; the rollout is not waiting at a gate")
        if stage is not None:
            st = self.state.stage(stage)
            if st is None:
                raise refused(f"unknown stage {stage!r}; stages: {', '.join(s.key for s in self.state.stages)}")
            wave = st.wave
        if wave != waiting:
            keys = ", ".join(st.key for st in self.state.wave_stages(waiting))
            raise refused(f"wave {wave} is not waiting for approval; wave {waiting} is ({keys})")
        return waiting

    @workflow.update(description='Approve the pending gate. JSON: {"wave": 4, "approver": "alice", "comment": "ok"} '
                                 '(or "stage": "eu-west-1/prod", any stage of the waiting wave).')
    def approve(self, req: Approve) -> Ack:
        wave = self._gate_wave(req.stage, req.wave)
        gates = list(self.state.pending_approvals)
        self.state.approved.extend(gates)
        self.controls.release("approval")
        self._audit(req.approver, "approve", f"wave-{wave}", req.comment)
        return Ack(message=f"approved wave {wave} ({', '.join(gates)}) by {req.approver}")

    @approve.validator
    def _validate_approve(self, req: Approve) -> None:
        self._check_running()
        self._check_approver(req.approver, "approver")
        self._gate_wave(req.stage, req.wave)

    @workflow.update(description='Reject the pending gate and roll back by the rollback scope. JSON: {"wave": 4, "approver": "alice", "reason": "why"}.')
    def reject(self, req: Reject) -> Ack:
        wave = self._gate_wave(req.stage, req.wave)
        self._audit(req.approver, "reject", f"wave-{wave}", req.reason)
        self._halt(Stop("rejected", f"wave {wave} rejected by {req.approver}: {req.reason}"))
        self.controls.release("approval")
        return Ack(message=f"rejected wave {wave}; rolling back")

    @reject.validator
    def _validate_reject(self, req: Reject) -> None:
        self._check_running()
        self._check_approver(req.approver, "approver")
        self._gate_wave(req.stage, req.wave)

    @workflow.update(description='Hold the rollout at the next safe point (before a wave, before promotion); soaks keep their clock. JSON: {"by": "alice", "reason": "why"}.')
    def pause(self, req: Pause) -> Ack:
        self.controls.pause(req.by, req.reason, holds_at=holds_at(self.state))
        for key, h in self.children.items():
            if not h.done():
                self._signal_stage(key, StageWorkflow.set_hold, True)
        self._publish()
        return Ack(message=f"paused by {req.by}; holds at the next safe point")

    @pause.validator
    def _validate_pause(self, req: Pause) -> None:
        self.controls.validate_pause()

    @workflow.update(description='Continue a paused rollout. JSON: {"by": "alice"}.')
    def resume(self, req: Resume) -> Ack:
        self.controls.resume(req.by)
        self._tell_stages_hold()  # still true while a stage is held on failure
        self._publish()
        return Ack(message=f"resumed by {req.by}")

    @resume.validator
    def _validate_resume(self, req: Resume) -> None:
        self.controls.validate_resume()

    @workflow.update(description='Stop the rollout and roll back by the request\'s rollback scope. JSON: {"by": "alice", "reason": "why"}.')
    def abort(self, req: Abort) -> Ack:
        self._audit(req.by, "abort", None, req.reason)
        self._halt(Stop("aborted", f"aborted by {req.by}: {req.reason}"))
        return Ack(message="aborting; rolling back")

    @abort.validator
    def _validate_abort(self, req: Abort) -> None:
        self._check_running()

    @workflow.update(description='Stop and roll back with an explicit scope ("stage", "region" or "all"). JSON: {"by": "alice", "reason": "why", "scope": "all"}.')
    def rollback(self, req: Rollback) -> Ack:
        scope = req.scope or self.req.rollback_scope
        self._audit(req.by, "rollback", None, f"scope {scope}: {req.reason}")
        self._halt(Stop("aborted", f"rolled back by {req.by} (scope {scope}): {req.reason}", scope))
        return Ack(message=f"rolling back, scope {scope}")

    @rollback.validator
    def _validate_rollback(self, req: Rollback) -> None:
        self._check_running()

    @workflow.update(description='End the soak of a soaking stage now. JSON: {"stage": "us-east-1/prod", "by": "alice", "reason": "why"}.')
    def skip_soak(self, req: SkipSoak) -> Ack:
        self._audit(req.by, "skip-soak", req.stage, req.reason)
        self.orders.skip_soak.setdefault(req.stage, f"{req.by}: {req.reason}")
        self._signal_stage(req.stage, StageWorkflow.skip_soak, f"{req.by}: {req.reason}")
        return Ack(message=f"soak of {req.stage} ends now")

    @skip_soak.validator
    def _validate_skip_soak(self, req: SkipSoak) -> None:
        self._check_running()
        self._check_approver(req.by, "by")
        self._check_stage(req.stage)
        soaking = self._soaking()
        if req.stage not in soaking:
            raise refused(f"{req.stage} is not soaking; soaking now: {', '.join(soaking) or 'none'}")

    @workflow.update(description='Start a stage outside its deployment window. JSON: {"stage": "eu-west-1/prod", "by": "alice", "reason": "why"}.')
    def override_window(self, req: OverrideWindow) -> Ack:
        self._audit(req.by, "override-window", req.stage, req.reason)
        if req.stage not in self.state.window_overrides:
            self.state.window_overrides.append(req.stage)
        return Ack(message=f"{req.stage} may start outside its window")

    @override_window.validator
    def _validate_override_window(self, req: OverrideWindow) -> None:
        self._check_running()
        self._check_approver(req.by, "by")
        self._check_stage(req.stage)
        window = waiting_window(self.state)
        if req.stage not in window:
            waiting = ", ".join(window) or "none"
            raise refused(f"{req.stage} is not waiting for a deployment window; waiting: {waiting}")

    @workflow.update(description='Decide on a stage held on failure (on_failure: hold): "retry" judges it again on a '
                                 'fresh window, "promote" promotes it, "rollback" rolls it back and the rollout by its '
                                 'scope. JSON: {"stage": "eu-west-1/prod", "action": "promote", "by": "alice", '
                                 '"reason": "why (required for promote and rollback)"}.')
    def resolve_hold(self, req: ResolveHold) -> Ack:
        self._resolve(req.stage, req.action, req.by, req.reason)
        what = {"retry": "judged again on a fresh window", "promote": "promoted", "rollback": "rolled back"}[req.action]
        return Ack(message=f"{req.stage} will be {what} ({req.action} by {req.by})")

    @resolve_hold.validator
    def _validate_resolve_hold(self, req: ResolveHold) -> None:
        self._check_running()
        self._check_approver(req.by, "by")
        self._check_stage(req.stage)
        if req.stage not in self._held:
            held = ", ".join(sorted(self._held)) or "none"
            raise refused(f"stage: {req.stage} is not held on failure; held now: {held}")

    def _check_stage(self, key: str) -> None:
        if self.state.stage(key) is None:
            raise refused(f"unknown stage {key!r}; stages: {', '.join(s.key for s in self.state.stages)}")


def _take(row: StageState, report: StageState) -> None:
    """Take a stage's own account into the rollout's row; the wave and key stay the rollout's."""
    for name, value in report.model_dump(exclude={"key", "region", "environment", "wave"}).items():
        setattr(row, name, value)


# The order a stage's statuses come in: a report behind the stage's own answer is merely older than it.
_STAGE_RANK = {s: i for i, s in enumerate(["pending", "deploying", "analyzing", "held", "promoting", "soaking", "succeeded",
                                            "evacuating", "rolling_back", "restoring_traffic"])}


def _does_not_fit(report: StageState, truth: StageState) -> str:
    """Why a progress report cannot have come from the stage, given its own answer now ('' if it could have)."""
    r, t = _STAGE_RANK.get(report.status, len(_STAGE_RANK)), _STAGE_RANK.get(truth.status, len(_STAGE_RANK))
    if r < t:
        return ""  # an older report: the stage has moved on
    if r == t and report.verdict in (None, truth.verdict) and report.report_url in (None, truth.report_url) \
            and report.soak_looks <= truth.soak_looks and (truth.awaiting_verdict or not report.awaiting_verdict):
        return ""
    return (f"the stage says it is {truth.status} (verdict {truth.verdict or 'none'}), not {report.status} "
            f"(verdict {report.verdict or 'none'})")


def _failure_state(err: BaseException) -> StageState | None:
    """The state a stage attached to its failure (RolledBack, Failed), or None if it failed for another reason."""
    cause = err.cause if isinstance(err, ChildWorkflowError) else None
    if isinstance(cause, ApplicationError) and cause.type in OUTCOME_FAILURE_TYPES.values() and cause.details:
        try:
            return StageState.model_validate(cause.details[0])
        except ValueError:
            return None
    return None
