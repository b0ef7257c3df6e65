"""RolloutWorkflow: runs a plan wave by wave, each stage a child StageWorkflow, and rolls back on failure.

Release managers drive it through validated updates (approve, reject, pause, resume, abort, rollback,
skip_soak, override_window) and read it through the `status` query and the UI's current details.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.deploy import DeployActivities
    from activities.models import RollbackInput, StageOnly
    from activities.notify import NotifyActivities
    from common.types import TERMINAL, Notification, RollbackScope, RolloutStatus, StageRef
    from workflows import options, search
    from workflows.details import rollout_details
    from workflows.lock import GRANTED_SIGNAL, REFUSED_SIGNAL, SUPERSEDED_SIGNAL, ServiceLock
    from workflows.models import AuditEntry, RolloutState, StageInput, StageState
    from workflows.plan import Plan, PlanError, Stage, Wave, build_plan
    from workflows.request import RolloutRequest
    from workflows.rollback import stages_to_roll_back
    from workflows.stage import PROGRESS_SIGNAL, StageWorkflow
    from workflows.updates import Abort, Ack, Approve, OverrideWindow, Pause, Reject, Resume, Rollback, SkipSoak
    from workflows.windows import next_open


@dataclass(frozen=True)
class Stop:
    """Why the rollout must stop early: the final status, the reason, and a rollback scope if one was chosen."""

    status: RolloutStatus
    reason: str
    scope: RollbackScope | None = None


class _Stopped(Exception):
    """Internal: unwinds the main flow once `self.stop` is set."""


@workflow.defn
class RolloutWorkflow:
    """One rollout of one service version across all planned stages."""

    @workflow.init
    def __init__(self, request: RolloutRequest) -> None:
        self.req = request
        info = workflow.info()
        self.state = RolloutState(rollout_id=info.workflow_id, service=request.service, version=request.version)
        self.plan: Plan | None = None
        self.paused = False
        self.stop: Stop | None = None
        self.window_overrides: set[str] = set()
        self.waiting_window: set[str] = set()
        self.children: dict[str, workflow.ChildWorkflowHandle] = {}
        self.failed_stage: str | None = None
        self.lock = ServiceLock(info.workflow_id, request.service, request.version, request.on_conflict)
        self._notifications: list[asyncio.Future[bool]] = []

    # -- main flow ---------------------------------------------------------------------------------
    @workflow.run
    async def run(self, request: RolloutRequest) -> RolloutState:
        try:
            self.plan = build_plan(request)
        except PlanError as err:
            self._set_status("failed", reason=str(err))
            raise ApplicationError(f"invalid plan: {err}", type="InvalidRequest", non_retryable=True) from None
        for wave in self.plan.waves:
            for s in wave.stages:
                self.state.stages.append(StageState.of(s.region, s.environment, wave.index))
        self.state.started_at = workflow.now()
        self._audit(request.requested_by, "submit", None, f"{request.service} {request.version}")
        try:
            self._set_status("queued", waiting_for=f"the {self.req.service} lock (another version may be rolling out)")
            if not await self.lock.acquire(give_up=lambda: self.stop is not None):
                raise _Stopped()
            self._set_status("running")
            self._notify("rollout_started", f"rolling out across {len(self.plan.waves)} waves")
            await self._inventory()
            for wave in self.plan.waves:
                self.state.current_wave = wave.index
                await self._before_wave(wave)
                await self._run_wave(wave)
                if self.failed_stage is not None or self.stop is not None:
                    break
            await self._finish()
        except _Stopped:
            await self._finish()
        except asyncio.CancelledError:
            if self.stop is None:
                self.stop = Stop("aborted", "workflow cancellation requested")
            await self._cancel_children()
            await self._finish()
        await self.lock.release()
        self._notify(f"rollout_{self.state.status}", self.state.reason)
        await asyncio.gather(*self._notifications, return_exceptions=True)
        await workflow.wait_condition(workflow.all_handlers_finished)
        self.state.ended_at = workflow.now()
        return self.state

    def _raise_if_stopped(self) -> None:
        if self.stop is not None:
            raise _Stopped()

    @workflow.signal(name=PROGRESS_SIGNAL, description="Internal: a stage reports its status.")
    def stage_progress(self, report: StageState) -> None:
        st = self.state.stage(report.key)
        if st is not None and report.key in self.children and not self.children[report.key].done():
            st.status = report.status
            workflow.set_current_details(self._details())

    @workflow.signal(name=GRANTED_SIGNAL, description="Internal: the service lock is ours.")
    def lock_granted(self, service: str) -> None:
        if self.lock.granted():
            self._audit("bifrost", "lock-granted", None, f"{service} lock acquired")

    @workflow.signal(name=REFUSED_SIGNAL, description="Internal: the service lock was refused (policy 'reject').")
    def lock_refused(self, reason: str) -> None:
        self.lock.refused(reason)
        if self.stop is None:
            self.stop = Stop("rejected", f"not started: {reason} (on_conflict: reject)")

    @workflow.signal(name=SUPERSEDED_SIGNAL, description="Internal: a newer version superseded this rollout (policy 'supersede').")
    def superseded(self, version: str) -> None:
        if self.stop is None and self.state.status not in TERMINAL:
            self._audit("bifrost", "superseded", None, f"by version {version}")
            self.stop = Stop("aborted", f"superseded by {self.req.service} {version}")

    def _notify(self, event: str, text: str, stage: str | None = None) -> None:
        """Tell humans (chat webhooks) without waiting: a notification never delays or fails the rollout."""
        self._notifications.append(asyncio.ensure_future(workflow.execute_activity_method(
            NotifyActivities.notify,
            Notification(rollout_id=self.state.rollout_id, service=self.req.service, version=self.req.version,
                         event=event, text=text, stage=stage),
            summary=f"notify {event}", **options.NOTIFY,
        )))

    def _ref(self, st: StageState | Stage) -> StageRef:
        return StageRef(service=self.req.service, region=st.region, environment=st.environment)

    async def _inventory(self) -> None:
        """Record which version every stage runs before anything changes."""
        assert self.plan is not None

        async def read(s: Stage) -> None:
            v = await workflow.execute_local_activity_method(
                DeployActivities.current_version, StageOnly(stage=self._ref(s)),
                summary=f"read version in {s.key}", **options.QUICK_LOCAL,
            )
            st = self.state.stage(s.key)
            assert st is not None
            st.version_before = st.version_now = v

        outcomes = await asyncio.gather(*(read(s) for s in self.plan.stages()), return_exceptions=True)
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        if errors:
            first = errors[0]
            cause = first.cause if isinstance(first, ActivityError) and first.cause else first
            self.stop = Stop("failed", f"nothing was deployed: could not read the current versions: {cause}", "stage")
            raise _Stopped()

    async def _before_wave(self, wave: Wave) -> None:
        """Safe point: honour pause, approval gates and deployment windows before a wave starts."""
        await self._wait_unpaused(f"wave {wave.index}")
        gates = self._gates_for(wave)
        if gates:
            self.state.pending_approvals = [g for g in gates if g not in self.state.approved]
            if self.state.pending_approvals:
                self._set_status("awaiting_approval", waiting_for=f"approval of {', '.join(self.state.pending_approvals)}")
                timeout = timedelta(hours=self.req.approvals.timeout_hours)
                try:
                    await workflow.wait_condition(
                        lambda: not self.state.pending_approvals or self.stop is not None,
                        timeout=timeout, timeout_summary=f"approval timeout for wave {wave.index}",
                    )
                except TimeoutError:
                    pending = ", ".join(self.state.pending_approvals)
                    self._audit("bifrost", "approval-timeout", pending, f"no answer within {self.req.approvals.timeout_hours:g} h")
                    self.stop = Stop("rejected", f"approval of {pending} timed out after {self.req.approvals.timeout_hours:g} h")
                    self.state.pending_approvals = []
                self._raise_if_stopped()
                self._set_status("running")
            await self._wait_unpaused(f"wave {wave.index}")
        await self._wait_windows(wave)

    def _gates_for(self, wave: Wave) -> list[str]:
        keys = {s.key for s in wave.stages}
        return [g.key for g in self.req.approvals.gates if g.wave == wave.index or (g.stage in keys)]

    async def _wait_unpaused(self, where: str) -> None:
        self._raise_if_stopped()
        if self.paused:
            self._set_status("paused", waiting_for=f"resume (held before {where})")
            await workflow.wait_condition(lambda: not self.paused or self.stop is not None)
            self._raise_if_stopped()
            self._set_status("running")

    async def _wait_windows(self, wave: Wave) -> None:
        regions = {r.name: r for r in self.req.regions}
        while True:
            now = workflow.now()
            closed: dict[str, datetime | None] = {}
            for s in wave.stages:
                if s.key in self.window_overrides:
                    continue
                opens = next_open(regions[s.region], now)
                if opens != now:
                    closed[s.key] = opens
            if not closed:
                self.waiting_window.clear()
                return
            self.waiting_window = set(closed)
            known = [t for t in closed.values() if t is not None]
            until = min(known) if known else None
            when = f"{until:%Y-%m-%d %H:%M} UTC" if until is not None else "never (freeze dates cover 400 days)"
            self._set_status("waiting_window", waiting_for=f"deployment window of {', '.join(sorted(closed))} (opens {when})")
            overrides = len(self.window_overrides)
            try:
                await workflow.wait_condition(
                    lambda n=overrides: len(self.window_overrides) != n or self.stop is not None,  # type: ignore[misc]
                    timeout=(until - now) if until is not None else None,
                    timeout_summary=f"window opens for {', '.join(sorted(closed))}",
                )
            except TimeoutError:
                pass
            self._raise_if_stopped()
            await self._wait_unpaused(f"wave {wave.index}")
            self._set_status("running")

    async def _run_wave(self, wave: Wave) -> None:
        """Start every stage of the wave; on the first failure or a stop, cancel the rest (they roll back)."""
        handles: dict[str, workflow.ChildWorkflowHandle] = {}
        self.children = handles  # filled as children start, so their first progress signals find them
        for s in wave.stages:
            st = self.state.stage(s.key)
            assert st is not None
            st.status = "deploying"
            handles[s.key] = await workflow.start_child_workflow(
                StageWorkflow.run,
                StageInput(
                    rollout_id=self.state.rollout_id, service=self.req.service, version=self.req.version,
                    image=self.req.image, region=s.region, environment=s.environment, wave=wave.index,
                    canary=self.req.canary, soak_hours=self.req.soak.hours(s.environment),
                ),
                id=f"{self.state.rollout_id}/{s.key}",
                task_queue=workflow.info().task_queue,
                parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
                static_summary=f"{self.req.service} {self.req.version} in {s.key}",
            )
            if self.paused:  # not awaited: a cancellation must not be absorbed by the signal's await
                asyncio.ensure_future(handles[s.key].signal(StageWorkflow.set_hold, True))
        self.state.current_stage = ", ".join(handles)
        self._set_status(self.state.status)

        def failed() -> bool:
            return any(h.done() and not h.cancelled() and (h.exception() is not None or not h.result().ok)
                       for h in handles.values())

        def all_done() -> bool:
            return all(h.done() for h in handles.values())

        await workflow.wait_condition(lambda: all_done() or failed() or self.stop is not None)
        if not all_done():  # a stage failed or the rollout was stopped: the others roll themselves back
            for h in handles.values():
                if not h.done():
                    h.cancel()
            await workflow.wait_condition(all_done)
        for key, h in handles.items():
            st = self.state.stage(key)
            assert st is not None
            try:
                res: StageState = await h
            except Exception as err:  # the child itself failed: we cannot know its version for sure
                res = StageState.of(st.region, st.environment, st.wave)
                res.status, res.reason = "failed", f"stage workflow failed: {err}"
            self._record(st, res)
            self._notify(f"stage_{res.status}", res.reason or f"{key} now on {res.version_now}", stage=key)
            if res.status in ("rolled_back", "failed") and self.failed_stage is None and self.stop is None:
                self.failed_stage = key
        self.children = {}

    def _record(self, st: StageState, res: StageState) -> None:
        """Take the stage's own account; keep the inventory's versions where the stage could not tell."""
        version_before = res.version_before if res.version_before is not None else st.version_before
        version_now = res.version_now
        status = res.status
        if res.version_now is None and res.status != "failed":
            version_now = st.version_now  # untouched: the inventory's reading stands
        if res.status == "skipped" and res.version_now is None:
            status = "pending"  # cancelled before it touched anything
        st.__dict__.update(res.model_dump(exclude={"key", "region", "environment", "wave"}))
        st.status, st.version_before, st.version_now = status, version_before, version_now
        if res.status == "failed":
            self._audit("bifrost", "stage-failed", st.key, res.reason)

    async def _cancel_children(self) -> None:
        for h in self.children.values():
            if not h.done():
                h.cancel()
        for key, h in list(self.children.items()):
            st = self.state.stage(key)
            if st is None:
                continue
            try:
                self._record(st, await h)
            except BaseException as err:  # noqa: BLE001 - record whatever happened
                st.status, st.reason = "failed", f"stage did not report after cancellation: {err}"
                st.version_now = None
        self.children = {}

    async def _finish(self) -> None:
        """Roll back completed stages by scope if anything went wrong, then set the final status."""
        if self.failed_stage is None and self.stop is None:
            self._set_status("succeeded", reason="every stage succeeded")
            return
        if self.stop is not None:
            stop = self.stop
        else:
            st = self.state.stage(self.failed_stage or "")
            stop = Stop("rolled_back", f"{self.failed_stage}: {st.reason if st else ''}")
        scope = stop.scope or self.req.rollback_scope
        status, reason = stop.status, stop.reason
        self._set_status("rolling_back", reason=reason)
        await self._roll_back(stages_to_roll_back(self.state.stages, scope), scope)
        if any(s.status == "failed" for s in self.state.stages):
            status = "failed"
            reason += " — some stages could not be rolled back; see their reasons"
        self._set_status(status, reason=reason)

    async def _roll_back(self, targets: list[StageState], scope: RollbackScope) -> None:
        for st in targets:
            st.status = "rolling_back"
            self.state.current_stage = st.key
            self._set_status("rolling_back")
            try:
                await workflow.execute_activity_method(
                    DeployActivities.rollback,
                    RollbackInput(stage=self._ref(st), to_version=st.version_before, reason=f"rollback scope {scope}"),
                    summary=f"roll back {st.key} to {st.version_before}", **options.ROLLBACK,
                )
            except ActivityError as err:
                st.status, st.reason, st.version_now = "failed", f"rollback failed: {err.cause or err}", None
                continue
            st.status, st.version_now = "rolled_back", st.version_before
            st.reason = f"rolled back (scope {scope})"

    # -- state, details, search attributes -------------------------------------------------------
    def _audit(self, who: str, action: str, target: str | None, detail: str = "") -> None:
        self.state.audit.append(AuditEntry(at=workflow.now(), who=who, action=action, target=target, detail=detail))

    def _set_status(self, status: RolloutStatus, *, reason: str | None = None, waiting_for: str | None = None) -> None:
        self.state.status = status
        if reason is not None:
            self.state.reason = reason
        self.state.waiting_for = waiting_for
        if status in TERMINAL:
            self.state.current_stage = None
        workflow.upsert_search_attributes([
            search.SERVICE.value_set(self.req.service),
            search.VERSION.value_set(self.req.version),
            search.STATUS.value_set(status),
            search.STAGE.value_set(self.state.current_stage or "-"),
            search.REQUESTED_BY.value_set(self.req.requested_by),
        ])
        workflow.set_current_details(self._details())

    def _details(self) -> str:
        return rollout_details(self.state, waves=len(self.plan.waves) if self.plan else 0, paused=self.paused,
                               waiting_window=self.waiting_window)

    # -- queries and updates ---------------------------------------------------------------------
    @workflow.query(description="Plan, per-stage state and versions, verdicts and reports, pending approvals, audit trail.")
    def status(self) -> RolloutState:
        return self.state

    def _check_running(self) -> None:
        if self.state.status in TERMINAL or self.stop is not None:
            raise ValueError(f"rollout is already {self.stop.status if self.stop else self.state.status}; nothing to do")

    def _check_approver(self, who: str) -> None:
        allowed = self.req.approvals.approvers
        if allowed and who not in allowed:
            raise ValueError(f"{who!r} is not an approver of this rollout; approvers: {', '.join(allowed)}")

    def _gate_key(self, stage: str | None, wave: int | None) -> str:
        if (stage is None) == (wave is None):
            raise ValueError('give exactly one of "stage" (e.g. "eu-west-1/prod") or "wave" (e.g. 2)')
        key = stage if stage is not None else f"wave-{wave}"
        if key not in self.state.pending_approvals:
            pending = ", ".join(self.state.pending_approvals) or "nothing"
            raise ValueError(f"{key} is not waiting for approval; pending: {pending}")
        return key

    @workflow.update(description='Approve a pending gate. JSON: {"stage": "eu-west-1/prod", "approver": "alice", "comment": "ok"} (or "wave": 3 instead of "stage").')
    def approve(self, req: Approve) -> Ack:
        key = self._gate_key(req.stage, req.wave)
        self.state.pending_approvals.remove(key)
        self.state.approved.append(key)
        self._audit(req.approver, "approve", key, req.comment)
        return Ack(message=f"approved {key} by {req.approver}")

    @approve.validator
    def _validate_approve(self, req: Approve) -> None:
        self._check_running()
        self._check_approver(req.approver)
        self._gate_key(req.stage, req.wave)

    @workflow.update(description='Reject a pending gate and roll back by the rollback scope. JSON: {"stage": "eu-west-1/prod", "approver": "alice", "reason": "why"}.')
    def reject(self, req: Reject) -> Ack:
        key = self._gate_key(req.stage, req.wave)
        self._audit(req.approver, "reject", key, req.reason)
        self.stop = Stop("rejected", f"{key} rejected by {req.approver}: {req.reason}")
        self.state.pending_approvals = []
        return Ack(message=f"rejected {key}; rolling back")

    @reject.validator
    def _validate_reject(self, req: Reject) -> None:
        self._check_running()
        self._check_approver(req.approver)
        self._gate_key(req.stage, req.wave)

    @workflow.update(description='Hold the rollout at the next safe point (before a wave, before promotion); soaks keep their clock. JSON: {"by": "alice", "reason": "why"}.')
    async def pause(self, req: Pause) -> Ack:
        self.paused = True
        self._audit(req.by, "pause", None, req.reason)
        for h in self.children.values():
            if not h.done():
                await h.signal(StageWorkflow.set_hold, True)
        self._set_status(self.state.status if self.state.status != "running" else "paused",
                         waiting_for="resume" if self.state.status == "running" else self.state.waiting_for)
        return Ack(message=f"paused by {req.by}; holds at the next safe point")

    @pause.validator
    def _validate_pause(self, req: Pause) -> None:
        self._check_running()
        if self.paused:
            raise ValueError("rollout is already paused; use resume")

    @workflow.update(description='Continue a paused rollout. JSON: {"by": "alice"}.')
    async def resume(self, req: Resume) -> Ack:
        self.paused = False
        self._audit(req.by, "resume", None)
        for h in self.children.values():
            if not h.done():
                await h.signal(StageWorkflow.set_hold, False)
        if self.state.status == "paused":
            self._set_status("running")
        return Ack(message=f"resumed by {req.by}")

    @resume.validator
    def _validate_resume(self, req: Resume) -> None:
        self._check_running()
        if not self.paused:
            raise ValueError("rollout is not paused")

    @workflow.update(description='Stop the rollout and roll back by the request\'s rollback scope. JSON: {"by": "alice", "reason": "why"}.')
    def abort(self, req: Abort) -> Ack:
        self._audit(req.by, "abort", None, req.reason)
        self.stop = Stop("aborted", f"aborted by {req.by}: {req.reason}")
        return Ack(message="aborting; rolling back")

    @abort.validator
    def _validate_abort(self, req: Abort) -> None:
        self._check_running()

    @workflow.update(description='Stop and roll back with an explicit scope ("stage", "region" or "all"). JSON: {"by": "alice", "reason": "why", "scope": "all"}.')
    def rollback(self, req: Rollback) -> Ack:
        scope = req.scope or self.req.rollback_scope
        self._audit(req.by, "rollback", None, f"scope {scope}: {req.reason}")
        self.stop = Stop("aborted", f"rolled back by {req.by} (scope {scope}): {req.reason}", scope)
        return Ack(message=f"rolling back, scope {scope}")

    @rollback.validator
    def _validate_rollback(self, req: Rollback) -> None:
        self._check_running()

    @workflow.update(description='End the soak of a soaking stage now. JSON: {"stage": "us-east-1/prod", "by": "alice", "reason": "why"}.')
    async def skip_soak(self, req: SkipSoak) -> Ack:
        self._audit(req.by, "skip-soak", req.stage, req.reason)
        await self.children[req.stage].signal(StageWorkflow.skip_soak, f"{req.by}: {req.reason}")
        return Ack(message=f"soak of {req.stage} ends now")

    @skip_soak.validator
    def _validate_skip_soak(self, req: SkipSoak) -> None:
        self._check_running()
        self._check_approver(req.by)
        self._check_stage(req.stage)
        soaking = self._soaking()
        if req.stage not in soaking:
            raise ValueError(f"{req.stage} is not soaking; soaking now: {', '.join(soaking) or 'none'}")

    @workflow.update(description='Start a stage outside its deployment window. JSON: {"stage": "eu-west-1/prod", "by": "alice", "reason": "why"}.')
    def override_window(self, req: OverrideWindow) -> Ack:
        self._audit(req.by, "override-window", req.stage, req.reason)
        self.window_overrides.add(req.stage)
        return Ack(message=f"{req.stage} may start outside its window")

    @override_window.validator
    def _validate_override_window(self, req: OverrideWindow) -> None:
        self._check_running()
        self._check_approver(req.by)
        self._check_stage(req.stage)
        if req.stage not in self.waiting_window:
            waiting = ", ".join(sorted(self.waiting_window)) or "none"
            raise ValueError(f"{req.stage} is not waiting for a deployment window; waiting: {waiting}")

    def _soaking(self) -> list[str]:
        """Running stages whose last reported status is the soak."""
        return sorted(st.key for st in self.state.stages
                      if st.status == "soaking" and st.key in self.children and not self.children[st.key].done())

    def _check_stage(self, key: str) -> None:
        if self.state.stage(key) is None:
            raise ValueError(f"unknown stage {key!r}; stages: {', '.join(s.key for s in self.state.stages)}")
