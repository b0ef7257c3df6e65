"""RolloutWorkflow: runs a plan wave by wave, each stage a child StageWorkflow, and rolls back on failure.

Release managers drive it through validated updates (approve, reject, pause, resume, abort, rollback,
skip_soak, override_window) and read it through the `status` query and the UI's current details.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.models import Notification, RollbackInput, StageOnly, StageRef
    from workflows import options, search
    from workflows.models import (
        TERMINAL, AuditEntry, RolloutResult, RolloutState, RolloutStatus, StageInput, StagePhase, StageResult,
        StageState,
    )
    from workflows.lock import LockRequest, lock_id
    from workflows.plan import Plan, PlanError, Stage, Wave, build_plan
    from workflows.request import RolloutRequest
    from workflows.stage import StageWorkflow
    from workflows.updates import Abort, Ack, Approve, OverrideWindow, Pause, Reject, Resume, Rollback, SkipSoak
    from workflows.windows import next_open


class _Stop(Exception):
    """Internal: the rollout must stop (abort, reject, rollback, approval timeout)."""


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
        self.stop: tuple[RolloutStatus, str, str | None] | None = None  # (status, reason, scope override)
        self.window_overrides: set[str] = set()
        self.waiting_window: set[str] = set()
        self.children: dict[str, workflow.ChildWorkflowHandle] = {}
        self.failed_stage: str | None = None
        self.lock: str = "none"  # none -> waiting -> granted | refused
        self._notifications: list[asyncio.Future] = []

    # -- main flow ---------------------------------------------------------------------------------
    @workflow.run
    async def run(self, request: RolloutRequest) -> RolloutResult:
        try:
            self.plan = build_plan(request)
        except PlanError as err:
            self._set_status("failed", reason=str(err))
            raise ApplicationError(f"invalid plan: {err}", type="InvalidRequest", non_retryable=True) from None
        for wave in self.plan.waves:
            for s in wave.stages:
                self.state.stages.append(StageState(key=s.key, region=s.region, environment=s.environment, wave=wave.index))
        self.state.started_at = workflow.now()
        self._audit(request.requested_by, "submit", None, f"{request.service} {request.version}")
        try:
            await self._acquire_lock()
            self._set_status("running")
            await self._notify("rollout_started", f"rolling out across {len(self.plan.waves)} waves")
            await self._inventory()
            for wave in self.plan.waves:
                self.state.current_wave = wave.index
                await self._before_wave(wave)
                await self._run_wave(wave)
                if self.failed_stage is not None or self.stop is not None:
                    break
            await self._finish()
        except _Stop:
            await self._finish()
        except asyncio.CancelledError:
            if self.stop is None:
                self.stop = ("aborted", "workflow cancellation requested", None)
            await self._cancel_children()
            await self._finish()
        await self._release_lock()
        await self._notify(f"rollout_{self.state.status}", self.state.reason)
        await asyncio.gather(*self._notifications, return_exceptions=True)
        await workflow.wait_condition(workflow.all_handlers_finished)
        self.state.ended_at = workflow.now()
        return RolloutResult(
            rollout_id=self.state.rollout_id, service=self.req.service, version=self.req.version,
            status=self.state.status, reason=self.state.reason, stages=self.state.stages, audit=self.state.audit,
            started_at=self.state.started_at, ended_at=self.state.ended_at,
        )

    async def _acquire_lock(self) -> None:
        """Wait for this service's lock: at most one rollout per service runs at a time."""
        self.lock = "waiting"
        self._set_status("queued", waiting_for=f"the {self.req.service} lock (another version may be rolling out)")
        await workflow.execute_activity(
            "request_service_lock",
            LockRequest(workflow_id=self.state.rollout_id, service=self.req.service, version=self.req.version,
                        policy=self.req.on_conflict),
            summary=f"ask for the {self.req.service} lock ({self.req.on_conflict})", **options.QUICK,
        )
        await workflow.wait_condition(lambda: self.lock != "waiting" or self.stop is not None)
        if self.stop is not None:
            raise _Stop()

    async def _release_lock(self) -> None:
        if self.lock in ("waiting", "granted"):
            self.lock = "released"
            await workflow.get_external_workflow_handle(lock_id(self.req.service)).signal(
                "release", self.state.rollout_id
            )

    @workflow.signal(description="Internal: a stage reports its phase.")
    def stage_progress(self, update: StagePhase) -> None:
        st = self.state.stage(update.key)
        if st is not None and update.key in self.children and not self.children[update.key].done():
            st.status = update.phase
            workflow.set_current_details(self._details())

    @workflow.signal(description="Internal: the service lock is ours.")
    def lock_granted(self, service: str) -> None:
        if self.lock == "waiting":
            self.lock = "granted"
            self._audit("bifrost", "lock-granted", None, f"{service} lock acquired")

    @workflow.signal(description="Internal: the service lock was refused (policy 'reject').")
    def lock_refused(self, reason: str) -> None:
        self.lock = "refused"
        if self.stop is None:
            self.stop = ("rejected", f"not started: {reason} (on_conflict: reject)", None)

    @workflow.signal(description="Internal: a newer version superseded this rollout (policy 'supersede').")
    def superseded(self, version: str) -> None:
        if self.stop is None and self.state.status not in TERMINAL:
            self._audit("bifrost", "superseded", None, f"by version {version}")
            self.stop = ("aborted", f"superseded by {self.req.service} {version}", None)

    async def _notify(self, event: str, text: str, stage: str | None = None) -> None:
        """Tell humans (chat webhooks) without waiting: a notification never delays or fails the rollout."""
        self._notifications.append(asyncio.ensure_future(workflow.execute_activity(
            "notify",
            Notification(rollout_id=self.state.rollout_id, service=self.req.service, version=self.req.version,
                         event=event, text=text, stage=stage),
            summary=f"notify {event}", **options.NOTIFY,
        )))

    async def _inventory(self) -> None:
        """Record which version every stage runs before anything changes."""
        assert self.plan is not None

        async def read(s: Stage) -> None:
            ref = StageRef(service=self.req.service, region=s.region, environment=s.environment)
            v = await workflow.execute_local_activity(
                "current_version", StageOnly(stage=ref), result_type=str, summary=f"read version in {s.key}", **options.QUICK
            )
            st = self.state.stage(s.key)
            assert st is not None
            st.version_before = st.version_now = v

        outcomes = await asyncio.gather(*(read(s) for s in self.plan.stages()), return_exceptions=True)
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        if errors:
            first = errors[0]
            cause = first.cause if isinstance(first, ActivityError) and first.cause else first
            self.stop = ("failed", f"nothing was deployed: could not read the current versions: {cause}", "stage")
            raise _Stop()

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
                except asyncio.TimeoutError:
                    pending = ", ".join(self.state.pending_approvals)
                    self._audit("bifrost", "approval-timeout", pending, f"no answer within {self.req.approvals.timeout_hours:g} h")
                    self.stop = ("rejected", f"approval of {pending} timed out after {self.req.approvals.timeout_hours:g} h", None)
                    self.state.pending_approvals = []
                if self.stop is not None:
                    raise _Stop()
                self._set_status("running")
            await self._wait_unpaused(f"wave {wave.index}")
        await self._wait_windows(wave)

    def _gates_for(self, wave: Wave) -> list[str]:
        keys = {s.key for s in wave.stages}
        return [g.key for g in self.req.approvals.gates if g.wave == wave.index or (g.stage in keys)]

    async def _wait_unpaused(self, where: str) -> None:
        if self.stop is not None:
            raise _Stop()
        if self.paused:
            self._set_status("paused", waiting_for=f"resume (held before {where})")
            await workflow.wait_condition(lambda: not self.paused or self.stop is not None)
            if self.stop is not None:
                raise _Stop()
            self._set_status("running")

    async def _wait_windows(self, wave: Wave) -> None:
        regions = {r.name: r for r in self.req.regions}
        while True:
            now = workflow.now()
            closed: dict[str, object] = {}
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
            until = min(known) if known else None  # type: ignore[type-var]
            when = f"{until:%Y-%m-%d %H:%M} UTC" if until is not None else "never (freeze dates cover 400 days)"
            self._set_status("waiting_window", waiting_for=f"deployment window of {', '.join(sorted(closed))} (opens {when})")
            overrides = set(self.window_overrides)
            timeout = (until - now) if until is not None else None  # type: ignore[operator]
            try:
                await workflow.wait_condition(
                    lambda: self.window_overrides != overrides or self.stop is not None,
                    timeout=timeout, timeout_summary=f"window opens for {', '.join(sorted(closed))}",
                )
            except asyncio.TimeoutError:
                pass
            if self.stop is not None:
                raise _Stop()
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
                    image=self.req.image, region=s.region, environment=s.environment, canary=self.req.canary,
                    soak_hours=self.req.soak.hours(s.environment),
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
                res: StageResult = await h
            except Exception as err:  # the child itself failed: we cannot know its version for sure
                res = StageResult(key=key, status="failed", reason=f"stage workflow failed: {err}")
            self._record(st, res)
            await self._notify(f"stage_{res.status}", res.reason or f"{key} now on {res.final_version}", stage=key)
            if res.status in ("rolled_back", "failed") and self.failed_stage is None and self.stop is None:
                self.failed_stage = key
        self.children = {}

    def _record(self, st: StageState, res: StageResult) -> None:
        st.status = res.status
        st.reason = res.reason
        st.verdict, st.score, st.report_path = res.verdict, res.score, res.report_path
        st.soak_looks, st.started_at, st.ended_at = res.soak_looks, res.started_at, res.ended_at
        if res.previous_version is not None:
            st.version_before = res.previous_version
        if res.final_version is not None or res.status == "failed":
            st.version_now = res.final_version  # None after a failed rollback: the version is unknown
        if res.status == "skipped" and res.final_version is None:
            st.status = "pending"  # cancelled before it touched anything
        if res.status == "failed":
            self._audit("bifrost", "stage-failed", st.key, res.reason)

    async def _cancel_children(self) -> None:
        for key, h in list(self.children.items()):
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
            status, reason, scope_override = self.stop
        else:
            st = self.state.stage(self.failed_stage or "")
            status, reason, scope_override = "rolled_back", f"{self.failed_stage}: {st.reason if st else ''}", None
        scope = scope_override or self.req.rollback_scope
        self._set_status("rolling_back", reason=reason)
        await self._rollback_completed(scope)
        if any(s.status == "failed" for s in self.state.stages):
            status = "failed"
            reason += " — some stages could not be rolled back; see their reasons"
        self._set_status(status, reason=reason)

    async def _rollback_completed(self, scope: str) -> None:
        if scope == "stage":
            return
        anchor_regions = {s.region for s in self.state.stages if s.status in ("rolled_back", "failed")}
        done = [s for s in self.state.stages if s.status == "succeeded"]
        targets = done if scope == "all" else [s for s in done if s.region in anchor_regions]
        for st in sorted(targets, key=lambda s: (s.wave, s.key), reverse=True):
            st.status = "rolling_back"
            self.state.current_stage = st.key
            self._set_status("rolling_back")
            ref = StageRef(service=self.req.service, region=st.region, environment=st.environment)
            try:
                await workflow.execute_activity(
                    "rollback", RollbackInput(stage=ref, to_version=st.version_before, reason=f"rollback scope {scope}"),
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
        """Markdown for the UI's Current Details: state, stage, what it waits for, and how to act."""
        s = self.state
        total = len(self.plan.waves) if self.plan else 0
        paras = [f"## {s.service} `{s.version}` — **{s.status.replace('_', ' ')}**"]
        if s.current_wave and s.status not in TERMINAL:
            paras.append(f"Wave {s.current_wave}/{total}; current stage: {s.current_stage or '-'}")
        if s.reason:
            paras.append(f"Reason: {s.reason}")
        if s.waiting_for:
            paras.append(f"Waiting for: {s.waiting_for}")
        examples = self._examples()
        if examples:
            paras.append("How to act (More actions → Send an Update, or the `bifrost` CLI):\n\n"
                         + "\n".join(f"- `{name}`: `{json.dumps(example)}`" for name, example in examples))
        reports = [f"- {st.key}: {st.verdict} ({st.score:g}) `{st.report_path}`"
                   for st in s.stages if st.report_path and st.score is not None]
        if reports:
            paras.append("Canary reports:\n\n" + "\n".join(reports))
        return "\n\n".join(paras)

    def _examples(self) -> list[tuple[str, dict]]:
        s = self.state
        if s.status in TERMINAL:
            return []
        who = "<your name>"
        out: list[tuple[str, dict]] = []
        if s.pending_approvals:
            gate = s.pending_approvals[0]
            target = {"wave": int(gate.removeprefix("wave-"))} if gate.startswith("wave-") else {"stage": gate}
            out.append(("approve", {**target, "approver": who, "comment": "looks good"}))
            out.append(("reject", {**target, "approver": who, "reason": "why"}))
        if self.waiting_window:
            out.append(("override_window", {"stage": sorted(self.waiting_window)[0], "by": who, "reason": "why"}))
        if self.paused:
            out.append(("resume", {"by": who}))
        else:
            out.append(("pause", {"by": who, "reason": "why"}))
        out.append(("abort", {"by": who, "reason": "why"}))
        return out

    # -- queries and updates ---------------------------------------------------------------------
    @workflow.query(description="Plan, per-stage state and versions, verdicts and reports, pending approvals, audit trail.")
    def status(self) -> RolloutState:
        return self.state

    def _check_running(self) -> None:
        if self.state.status in TERMINAL or self.stop is not None:
            raise ValueError(f"rollout is already {self.stop[0] if self.stop else self.state.status}; nothing to do")

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
        self.stop = ("rejected", f"{key} rejected by {req.approver}: {req.reason}", None)
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
        self.stop = ("aborted", f"aborted by {req.by}: {req.reason}", None)
        return Ack(message="aborting; rolling back")

    @abort.validator
    def _validate_abort(self, req: Abort) -> None:
        self._check_running()

    @workflow.update(description='Stop and roll back with an explicit scope ("stage", "region" or "all"). JSON: {"by": "alice", "reason": "why", "scope": "all"}.')
    def rollback(self, req: Rollback) -> Ack:
        scope = req.scope or self.req.rollback_scope
        self._audit(req.by, "rollback", None, f"scope {scope}: {req.reason}")
        self.stop = ("aborted", f"rolled back by {req.by} (scope {scope}): {req.reason}", scope)
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
        """Running stages whose last reported phase is the soak."""
        return sorted(st.key for st in self.state.stages
                      if st.status == "soaking" and st.key in self.children and not self.children[st.key].done())

    def _check_stage(self, key: str) -> None:
        if self.state.stage(key) is None:
            raise ValueError(f"unknown stage {key!r}; stages: {', '.join(s.key for s in self.state.stages)}")
