"""ServiceLockWorkflow: at most one rollout per service at a time, with queue / supersede / reject policies.

Rollouts reach it with signal-with-start (atomic, so racing submissions are ordered by the server);
the lock answers each rollout with a signal: granted, refused, or superseded.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, Field
from temporalio import workflow

IDLE_BEFORE_EXIT = timedelta(minutes=5)
HOLDER_CHECK_INTERVAL = timedelta(minutes=10)  # how often a lock checks that its holder still runs


class LockRequest(BaseModel):
    """A rollout asking for its service's lock, with the policy of its request."""

    workflow_id: str
    service: str
    version: str
    policy: str = "queue"


class LockState(BaseModel):
    service: str
    holder: LockRequest | None = None
    queue: list[LockRequest] = Field(default_factory=list)
    log: list[str] = Field(default_factory=list)
    holder_check_seconds: float = Field(default=HOLDER_CHECK_INTERVAL.total_seconds(), gt=0)


def lock_id(service: str) -> str:
    return f"service-lock/{service}"


@workflow.defn
class ServiceLockWorkflow:
    """Grants the lock in arrival order; exits after a quiet period with nobody waiting."""

    @workflow.init
    def __init__(self, state: LockState) -> None:
        self.state = state
        self.outbox: list[tuple[str, str, str]] = []  # (workflow_id, signal, argument)

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
                await workflow.wait_condition(lambda: bool(self.outbox),
                                              timeout=timedelta(seconds=self.state.holder_check_seconds),
                                              timeout_summary="check that the holder is still running")
            except TimeoutError:
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
        running = await workflow.execute_activity(
            "rollout_is_running", holder.workflow_id, result_type=bool,
            start_to_close_timeout=timedelta(seconds=30), summary=f"is {holder.workflow_id} still running?",
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
            self.outbox.append((self.state.holder.workflow_id, "lock_granted", self.state.service))

    @workflow.signal(description="Internal: a rollout asks for the service lock.")
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
            self.outbox.append((req.workflow_id, "lock_refused", f"{busy} is already rolling out {self.state.service}"))
        elif req.policy == "supersede":
            for waiting in self.state.queue:
                self.outbox.append((waiting.workflow_id, "superseded", req.version))
            self.state.queue = [req]
            if holder is not None:
                self.state.log.append(f"{req.workflow_id} supersedes {holder.workflow_id}")
                self.outbox.append((holder.workflow_id, "superseded", req.version))
            self._grant_next()
        else:
            self.state.queue.append(req)
            self.state.log.append(f"queued {req.workflow_id} behind {busy}")

    @workflow.signal(description="Internal: a rollout has finished and gives the lock back.")
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
