"""Lock activities: reach the service lock workflow on behalf of a rollout (they need a Temporal client).

Anyone may start a `ServiceLockWorkflow` as `service-lock/<service>` by hand: on a task queue no Bifrost worker polls
(a signal-with-start then only signals a run that never answers), or with a holder or queue it did not confirm.
So after its signal-with-start, `request_service_lock` reads the start of the run it reached and, if that run is not
a Bifrost lock for this rollout, terminates it (the reason says why) and signal-with-starts a true one: an impostor
never blocks the service, and a rollout never waits on a run that will not answer.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from temporalio import activity
from temporalio.api.enums.v1 import ContinueAsNewInitiator
from temporalio.api.history.v1 import WorkflowExecutionStartedEventAttributes
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowQueryFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from activities.peers import terminate_run
from common.lock import (
    ACQUIRE_SIGNAL,
    CLAIMANT_TYPES,
    LOCK_CLAIM_QUERY,
    LOCK_WORKFLOW,
    RECOVER_MAX_RUNS,
    LockClaim,
    LockRequest,
    LockState,
    RecoveredClaims,
    lock_id,
    own_fields_given,
)
from common.text import terminal

IMPOSTOR_TRIES = 3  # impostors terminated before the activity gives up (and its retry policy tries again)
CHAIN_HOPS = 20  # how far back a chain of continue-as-new runs is followed to the run that started it
CLAIM_TIMEOUT = timedelta(seconds=10)  # a run that does not answer its claim in this time is skipped (under CONFIRM's 45 s)


class LockActivities:
    """Holds the clients used to reach the lock workflow (`locks`: the machinery namespace, where it runs) and the
    rollouts and reverts that hold it (`client`: the namespace people open)."""

    def __init__(self, client: Client, task_queue: str, holder_check: timedelta | None = None,
                 locks: Client | None = None) -> None:
        self.client = client
        self.locks = locks or client
        self.task_queue = task_queue
        self.holder_check = holder_check

    @activity.defn
    async def request_service_lock(self, req: LockRequest) -> None:
        """Signal-with-start the service's lock: atomic, so racing rollouts are ordered by the server. The run reached
        must be a Bifrost lock on this rollout's own task queue; any other run under the lock's id is terminated."""
        queue = activity.info().task_queue  # the rollout's: its workers run the lock too
        state = LockState(service=req.service)
        if self.holder_check is not None:
            state.holder_check_seconds = self.holder_check.total_seconds()
        lock = lock_id(req.service)
        for _ in range(IMPOSTOR_TRIES):
            handle = await self.locks.start_workflow(
                LOCK_WORKFLOW,
                state,
                id=lock,
                task_queue=queue,
                start_signal=ACQUIRE_SIGNAL,
                start_signal_args=[req],
                static_summary=f"one rollout at a time for {req.service}",
                task_timeout=timedelta(seconds=10),
            )
            run_id = handle.result_run_id or ""
            why = await self._not_a_lock(lock, run_id, req.service, queue)
            if why is None:
                return
            reason = terminal(f"not a Bifrost lock: {why}; terminated by {req.workflow_id} so that a true lock can start")
            activity.logger.warning("%s run %s: %s", lock, run_id, reason)
            await terminate_run(self.locks, lock, run_id, reason)  # already closed: nothing to end
        raise ApplicationError(f"{lock} was started by someone else again and again ({IMPOSTOR_TRIES} times); "
                               f"terminate it and submit again")

    async def _not_a_lock(self, lock: str, run_id: str, service: str, queue: str) -> str | None:
        """Why the run `run_id` of `lock` is not a Bifrost lock for `service` on `queue`, or None when it is: a
        ServiceLockWorkflow on `queue` started empty, or continued as new by such runs only (followed back to the
        run that began the chain, or as far as histories are kept)."""
        run = run_id
        for hop in range(CHAIN_HOPS + 1):
            start = await self._start_of(lock, run)
            if start is None:
                if hop == 0:
                    raise ApplicationError(f"the run {run_id} of {lock} that the lock request reached has no history")
                return None  # the chain's beginning is past the namespace's retention: its later runs were checked
            if start.workflow_type.name != LOCK_WORKFLOW:
                return f"run {run} is a {start.workflow_type.name}, not a {LOCK_WORKFLOW}"
            if start.task_queue.name != queue:
                return (f"run {run} runs on task queue {start.task_queue.name!r}, not on {queue!r}, where this "
                        f"service's rollouts and their workers are")
            if not start.continued_execution_run_id or \
                    start.initiator != ContinueAsNewInitiator.CONTINUE_AS_NEW_INITIATOR_WORKFLOW:
                return await self._not_empty(run, start, service)
            run = start.continued_execution_run_id
        return None  # a long chain of the lock's own runs on this queue

    async def _not_empty(self, run: str, start: WorkflowExecutionStartedEventAttributes, service: str) -> str | None:
        """Why a lock's first input (given by whoever started it, or again by a cron or retry) is not the empty
        state of `service`'s lock that a rollout gives, or None when it is."""
        try:
            [state] = await self.locks.data_converter.decode(start.input.payloads, [LockState])
        except (ApplicationError, ValueError, TypeError):
            return f"run {run} was started with something else than a lock's state"
        if state.service != service:
            return f"run {run} is a lock for {state.service!r}, not {service!r}"
        given = own_fields_given(state)
        if given:
            return f"run {run} was started with a {', '.join(given)} that no lock confirmed"
        return None

    async def _start_of(self, lock: str, run_id: str) -> WorkflowExecutionStartedEventAttributes | None:
        """The start event of one run of `lock`; None when its history is gone."""
        try:
            async for event in self.locks.get_workflow_handle(lock, run_id=run_id).fetch_history_events(page_size=1):
                if event.HasField("workflow_execution_started_event_attributes"):
                    return event.workflow_execution_started_event_attributes
                break
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        return None

    @activity.defn
    async def recover_claims(self, service: str) -> RecoveredClaims:
        """The lock claims of `service`'s running rollouts and reverts on this lock's own task queue, each asked of
        the run itself (the visibility list only says whom to ask), oldest first; at most RECOVER_MAX_RUNS runs."""
        queue = activity.info().task_queue  # the lock's own: a run on another queue does not run Bifrost's code
        types = " OR ".join(f"WorkflowType = {_quoted(t)}" for t in CLAIMANT_TYPES)
        query = (f"({types}) AND BifrostService = {_quoted(service)} AND TaskQueue = {_quoted(queue)} "
                 "AND ExecutionStatus = 'Running'")
        listed: list[tuple[str, str]] = []
        async for wf in self.client.list_workflows(query, page_size=RECOVER_MAX_RUNS):
            listed.append((wf.id, wf.run_id))
            if len(listed) >= RECOVER_MAX_RUNS:
                break
        asked = await asyncio.gather(*(self._claim_of(wid, run, service, queue) for wid, run in listed))
        found = RecoveredClaims()
        for (wid, _), (claim, _started, why) in sorted(zip(listed, asked, strict=True), key=lambda a: a[1][1]):
            if why:
                found.skipped.append(f"{wid}: {why}")
            elif claim is not None and claim.status == "granted":
                found.holders.append(claim.request)
            elif claim is not None and claim.status == "waiting":
                found.waiting.append(claim.request)
        return found

    async def _claim_of(self, workflow_id: str, run_id: str, service: str,
                        queue: str) -> tuple[LockClaim | None, datetime, str]:
        """One run's own claim for `service`'s lock, its start time, and why it was skipped ('' when asked)."""
        never = datetime.max
        handle = self.client.get_workflow_handle(workflow_id, run_id=run_id)
        try:
            desc = await handle.describe(rpc_timeout=CLAIM_TIMEOUT)
            if desc.task_queue != queue or desc.workflow_type not in CLAIMANT_TYPES \
                    or desc.status != WorkflowExecutionStatus.RUNNING:
                return None, never, ""  # the list was stale or wrong: not a claimant here
            answer = await asyncio.wait_for(handle.query(LOCK_CLAIM_QUERY, rpc_timeout=CLAIM_TIMEOUT),
                                            CLAIM_TIMEOUT.total_seconds())
            claim = LockClaim.model_validate(answer)
        except (RPCError, WorkflowQueryFailedError, TimeoutError, ValueError) as err:
            return None, never, f"its claim could not be read ({type(err).__name__}: {str(err)[:200]})"
        if claim.request.workflow_id != workflow_id or claim.request.service != service:
            return None, never, f"it claims a lock for {claim.request.workflow_id} of {claim.request.service}"
        return claim, desc.start_time.replace(tzinfo=None), ""

    @activity.defn
    async def rollout_is_running(self, workflow_id: str) -> bool:
        """False once the rollout has closed (completed, failed, terminated) or does not exist."""
        try:
            desc = await self.client.get_workflow_handle(workflow_id).describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return desc.status == WorkflowExecutionStatus.RUNNING


def _quoted(value: str) -> str:
    """A string literal for a visibility query."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
