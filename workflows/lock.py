"""One rollout per service: the lock workflow, and `ServiceLock`, the rollout's side of its protocol.

Rollouts reach the lock with signal-with-start (an activity, atomic, so racing submissions are ordered by the
server); the lock answers each rollout with a signal: granted, refused, or superseded.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.lock import LockActivities
    from common.lock import ACQUIRE_SIGNAL, LOCK_WORKFLOW, LockRequest, LockState, lock_id
    from common.types import ConcurrencyPolicy
    from workflows import options

IDLE_BEFORE_EXIT = timedelta(minutes=5)

# What the lock sends back to a rollout; the rollout's handlers carry these names.
GRANTED_SIGNAL = "lock_granted"
REFUSED_SIGNAL = "lock_refused"
SUPERSEDED_SIGNAL = "superseded"
RELEASE_SIGNAL = "release"


@workflow.defn(name=LOCK_WORKFLOW, failure_exception_types=options.FAIL_ON_BUGS)
class ServiceLockWorkflow:
    """Grants the lock in arrival order; exits after a quiet period with nobody waiting."""

    @workflow.init
    def __init__(self, state: LockState) -> None:
        self.state = state
        self.outbox: list[tuple[str, str, str]] = []  # (workflow_id, signal, argument)
        self.check_holder_now = False  # someone is waiting: make sure the holder is still alive

    @workflow.run
    async def run(self, state: LockState) -> None:
        while True:
            await self._flush()
            if self.state.holder is None and not self.state.queue:
                try:
                    await workflow.wait_condition(lambda: bool(self.outbox) or self.state.holder is not None,
                                                  timeout=IDLE_BEFORE_EXIT, timeout_summary="idle: no rollout waiting")
                except TimeoutError:
                    await workflow.wait_condition(workflow.all_handlers_finished)
                    if not self.outbox and self.state.holder is None and not self.state.queue:
                        return
                continue
            try:
                await workflow.wait_condition(lambda: bool(self.outbox) or self.check_holder_now,
                                              timeout=timedelta(seconds=self.state.holder_check_seconds),
                                              timeout_summary="check that the holder is still running")
            except TimeoutError:
                self.check_holder_now = True
            if self.check_holder_now:
                self.check_holder_now = False
                await self._check_holder()
            if workflow.info().is_continue_as_new_suggested():
                await self._flush()
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(self.state)

    async def _check_holder(self) -> None:
        """A rollout that was terminated never releases the lock: free it so the queue moves on."""
        holder = self.state.holder
        if holder is None:
            return
        running = await workflow.execute_activity_method(
            LockActivities.rollout_is_running, holder.workflow_id,
            summary=f"is {holder.workflow_id} still running?", **options.QUICK,
        )
        if not running and self.state.holder is holder:
            self.state.log.append(f"{holder.workflow_id} ended without releasing; lock freed")
            self.release(holder.workflow_id)

    async def _flush(self) -> None:
        while self.outbox:
            target, signal, arg = self.outbox.pop(0)
            await workflow.get_external_workflow_handle(target).signal(signal, arg)

    def _grant_next(self) -> None:
        if self.state.holder is None and self.state.queue:
            self.state.holder = self.state.queue.pop(0)
            self.state.log.append(f"granted {self.state.holder.workflow_id}")
            self.outbox.append((self.state.holder.workflow_id, GRANTED_SIGNAL, self.state.service))

    @workflow.signal(name=ACQUIRE_SIGNAL, description="Internal: a rollout asks for the service lock.")
    def acquire(self, req: LockRequest) -> None:
        known = [self.state.holder, *self.state.queue]
        if any(k is not None and k.workflow_id == req.workflow_id for k in known):
            return  # a retried request: already holding or waiting
        holder = self.state.holder
        if holder is None and not self.state.queue:
            self.state.queue.append(req)
            self._grant_next()
            return
        busy = holder.workflow_id if holder else self.state.queue[0].workflow_id
        if req.policy == "reject":
            self.state.log.append(f"refused {req.workflow_id}: {busy} is active")
            self.outbox.append((req.workflow_id, REFUSED_SIGNAL, f"{busy} is already rolling out {self.state.service}"))
        elif req.policy == "supersede":
            for waiting in self.state.queue:
                self.outbox.append((waiting.workflow_id, SUPERSEDED_SIGNAL, req.version))
            self.state.queue = [req]
            if holder is not None:
                self.state.log.append(f"{req.workflow_id} supersedes {holder.workflow_id}")
                self.outbox.append((holder.workflow_id, SUPERSEDED_SIGNAL, req.version))
            self._grant_next()
        else:
            self.state.queue.append(req)
            self.state.log.append(f"queued {req.workflow_id} behind {busy}")
            self.check_holder_now = True  # a holder that ended without releasing must not keep anyone waiting

    @workflow.signal(name=RELEASE_SIGNAL, description="Internal: a rollout has finished and gives the lock back.")
    def release(self, workflow_id: str) -> None:
        if self.state.holder is not None and self.state.holder.workflow_id == workflow_id:
            self.state.log.append(f"released by {workflow_id}")
            self.state.holder = None
            self._grant_next()
        else:
            self.state.queue = [q for q in self.state.queue if q.workflow_id != workflow_id]

    @workflow.query(description="Who holds the service lock and who waits.")
    def lock_state(self) -> LockState:
        return self.state


class LockStatus(enum.Enum):
    """Where a rollout stands with its service's lock."""

    NONE = "none"
    WAITING = "waiting"
    GRANTED = "granted"
    REFUSED = "refused"
    RELEASED = "released"


class ServiceLock:
    """The rollout's side of the lock protocol: ask, wait for the answer, give it back.

    The rollout's signal handlers for GRANTED_SIGNAL, REFUSED_SIGNAL and SUPERSEDED_SIGNAL call `granted`,
    `refused` and `superseded` here."""

    def __init__(self, rollout_id: str, service: str, version: str, policy: ConcurrencyPolicy) -> None:
        self.request = LockRequest(workflow_id=rollout_id, service=service, version=version, policy=policy)
        self.status = LockStatus.NONE
        self.refusal: str | None = None

    async def acquire(self, give_up: Callable[[], bool]) -> bool:
        """Ask for the lock and wait for the answer (or until `give_up()`); True when it is ours."""
        self.status = LockStatus.WAITING
        await workflow.execute_activity_method(
            LockActivities.request_service_lock, self.request,
            summary=f"ask for the {self.request.service} lock ({self.request.policy})", **options.QUICK,
        )
        await workflow.wait_condition(lambda: self.status is not LockStatus.WAITING or give_up())
        return self.status is LockStatus.GRANTED

    async def release(self) -> None:
        """Give the lock back (also withdraws a request still waiting in the queue)."""
        if self.status in (LockStatus.WAITING, LockStatus.GRANTED):
            self.status = LockStatus.RELEASED
            await workflow.get_external_workflow_handle(lock_id(self.request.service)).signal(
                RELEASE_SIGNAL, self.request.workflow_id
            )

    def granted(self) -> bool:
        """The lock answered 'yours'; False when the answer came too late to matter."""
        if self.status is LockStatus.WAITING:
            self.status = LockStatus.GRANTED
            return True
        return False

    def refused(self, reason: str) -> None:
        self.status = LockStatus.REFUSED
        self.refusal = reason
