"""Peer queries: a workflow confirms what an internal signal claims by asking the sender's own state.

Signals carry no sender and have no validators (anyone who may act on the namespace can send any signal by
hand), so the rollout, its stages and the service lock treat an internal signal as a poke and act only on
what a query of the other workflow answers; queries change nothing and answer only from that workflow's own
code."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, Field
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowQueryFailedError
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.service import RPCError, RPCStatusCode

from activities.describe import SHORT_RPC_TIMEOUT, describe_run
from activities.origin import Origin, OriginQuery, find_origin
from common.failures import WORKER_SHUTTING_DOWN
from common.runs import foreign_run

QUERY_RPC_TIMEOUT = timedelta(seconds=30)  # under the activity's start-to-close (options.CONFIRM); a busy server is slow, not gone


class PeerQuery(BaseModel):
    """Ask workflow `workflow_id` its query `query` (no argument).

    With `task_queue` (and `workflow_type`), only a run on that task queue (of that type) is asked: a run started by
    hand on a task queue no Bifrost worker polls would otherwise hold the query until its timeout, and one of another
    type could answer anything. Such a run is answered as an `error`, never as its answer."""

    workflow_id: str
    query: str
    task_queue: str | None = None
    workflow_type: str | None = None
    namespace: str | None = None  # None: the worker's home namespace; else it or its machinery namespace


class PeerAnswer(BaseModel):
    """The answer as plain JSON for the caller's own model to validate; `found` is False if there is no such workflow."""

    found: bool
    answer: Any = None
    error: str | None = None  # the query failed (a workflow of another type, or a bug in its handler)
    running: bool | None = None  # whether the run asked is running (known when the query named a task queue)


def _foreign(q: PeerQuery, task_queue: str, workflow_type: str) -> str:
    """Why the run found is not the one asked for ('' when it is): another task queue or another workflow type."""
    why = foreign_run(workflow_type, task_queue, want_type=q.workflow_type, want_queue=q.task_queue)
    return f"{q.workflow_id} {why}: not Bifrost's, not asked (its answer would not come from Bifrost's code)" if why else ""


_GONE = (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION)  # ended between a look and the terminate


async def terminate_run(client: Client, workflow_id: str, run_id: str | None, reason: str) -> None:
    """Terminate that very run; one that ended meanwhile (not found, already completed) is fine."""
    try:
        await client.get_workflow_handle(workflow_id, run_id=run_id).terminate(reason=reason)
    except RPCError as err:
        if err.status not in _GONE:
            raise


def _retrieved(task: asyncio.Task[PeerAnswer]) -> None:
    if not task.cancelled():
        task.exception()


async def _unless_worker_stops(shared: asyncio.Future[PeerAnswer], q: PeerQuery) -> PeerAnswer:
    """The answer, or a retryable failure as soon as this worker begins to shut down.

    A stopping worker polls no more workflow tasks, and a query is answered by a worker polling the queried
    workflow's task queue: with this worker the only one (a single `bifrost worker` restarting, a benchmark
    leaving its worker while the lock still confirms the last rollout's release), the query goes unanswered until
    its RPC timeout, 30 s that the worker's graceful shutdown spends waiting for this activity. Failing the attempt
    at once lets the activity's retry ask again through whichever worker polls next (docs/benchmarks.md)."""
    if not activity.in_activity():
        return await shared
    stopping = asyncio.ensure_future(activity.wait_for_worker_shutdown())
    either: list[asyncio.Future[Any]] = [shared, stopping]
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        if not shared.done():
            shared.cancel()  # only this asker's shield: the query itself goes on for any other asker
    if not shared.cancelled():
        return shared.result()  # answered first (or failed on its own): as before
    if not activity.is_worker_shutdown():
        raise asyncio.CancelledError()  # the shared query itself was cancelled
    raise ApplicationError(f"this worker is shutting down: the {q.query} query of {q.workflow_id} may have no worker "
                           "left to answer it; the next attempt asks again", type=WORKER_SHUTTING_DOWN,
                           category=ApplicationErrorCategory.BENIGN)  # expected at every stop: a DEBUG line, no traceback


class CancelRequestQuery(BaseModel):
    """Find who asked run `run_id` of workflow `workflow_id` to cancel."""

    workflow_id: str
    run_id: str


class CancelRequest(BaseModel):
    """The run's WorkflowExecutionCancelRequested event, as the server recorded it.

    `identity` is what the requesting client sent (the Web UI sends its user's identity; the CLI and SDKs
    send `pid@host` unless told otherwise): self-reported, so it attributes the request in the audit and
    gates nothing. The SDK gives workflow code the request's reason but not its identity, hence this read."""

    found: bool
    identity: str = ""
    reason: str = ""
    by_workflow: str = Field(default="", description="the workflow that requested it (a parent), if any")


class CancelRun(BaseModel):
    """Ask run `run_id` of workflow `workflow_id` to cancel: a workflow asking for its own cancellation, so that it
    can end Canceled (workflows/controls/ending.py); the server refuses a workflow's command to cancel itself.
    With `run_id` empty, the latest run (a rollout's stage left by a previous run, in the machinery namespace)."""

    workflow_id: str
    run_id: str
    reason: str = Field(default="", max_length=200)
    namespace: str | None = None


class PeerSignal(BaseModel):
    """Signal workflow `workflow_id` in `namespace` (None: the home namespace) with `signal` and its one argument:
    how a signal crosses between the namespace people open and the machinery namespace."""

    workflow_id: str
    signal: str
    arg: Any = None
    namespace: str | None = None


class PeerRun(BaseModel):
    """One run of a workflow in a namespace (None: the home namespace)."""

    workflow_id: str
    run_id: str
    namespace: str | None = None


MAX_IDENTITY_CHARS = 200  # an identity is free text the client chose: kept short for the audit and the UI


class PeerActivities:
    """Holds the client used to query other workflows.

    Concurrent askers of the same query of the same workflow share one query started after each of them asked:
    the answer is as fresh as asking alone. Six stages confirming their rollout's verdict at once used to send six
    queries to one workflow together; the SDK's worker holds at most one such query task per workflow, so five
    were answered only on the server's retry, about a second late (docs/benchmarks.md)."""

    def __init__(self, client: Client, machinery: Client | None = None) -> None:
        self.client = client
        self.machinery = machinery
        self._flying: dict[tuple[str, ...], asyncio.Task[PeerAnswer]] = {}  # the query being asked now
        self._next: dict[tuple[str, ...], asyncio.Task[PeerAnswer]] = {}  # asked when that one ends; askers join it

    @activity.defn
    async def query_workflow(self, q: PeerQuery) -> PeerAnswer:
        """Run a query on the latest run of `workflow_id` (a closed one answers from its final state)."""
        key = (q.workflow_id, q.query, q.task_queue or "", q.workflow_type or "")
        task = self._next.get(key)
        if task is None:
            task = self._next[key] = asyncio.get_running_loop().create_task(self._after(key, q, self._flying.get(key)))
            task.add_done_callback(_retrieved)  # every asker may have been cancelled: its error is theirs, not a log line
        return await _unless_worker_stops(asyncio.shield(task), q)  # an asker cancelled leaves the query to the others

    async def _after(self, key: tuple[str, ...], q: PeerQuery, before: asyncio.Task[PeerAnswer] | None) -> PeerAnswer:
        if before is not None:
            await asyncio.wait([before])  # whatever its outcome: it started before some of our askers asked
        me = self._next.pop(key)
        self._flying[key] = me
        try:
            return await self._ask(q)
        finally:
            if self._flying.get(key) is me:
                del self._flying[key]

    def on(self, namespace: str | None) -> Client:
        """The client of `namespace` (None: the home namespace); only the two this worker serves."""
        if namespace is None or namespace == self.client.namespace:
            return self.client
        if self.machinery is not None and namespace == self.machinery.namespace:
            return self.machinery
        raise ApplicationError(f"namespace {namespace!r} is not served by this worker (it serves "
                               f"{self.client.namespace!r} and its machinery namespace)", type="InvalidRequest",
                               non_retryable=True)

    async def _ask(self, q: PeerQuery) -> PeerAnswer:
        running: bool | None = None
        client = self.on(q.namespace)
        try:
            handle = client.get_workflow_handle(q.workflow_id)
            if q.task_queue is not None or q.workflow_type is not None:
                described = await handle.describe(rpc_timeout=QUERY_RPC_TIMEOUT)
                foreign = _foreign(q, described.task_queue, described.workflow_type)
                if foreign:
                    return PeerAnswer(found=True, error=foreign)
                running = described.status == WorkflowExecutionStatus.RUNNING
                handle = client.get_workflow_handle(q.workflow_id, run_id=described.run_id)  # the run described
            answer = await handle.query(q.query, rpc_timeout=QUERY_RPC_TIMEOUT)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return PeerAnswer(found=False)
            raise
        except WorkflowQueryFailedError as err:
            return PeerAnswer(found=True, error=str(err), running=running)
        return PeerAnswer(found=True, answer=answer, running=running)

    @activity.defn
    async def cancel_request(self, q: CancelRequestQuery) -> CancelRequest:
        """Who asked this run to cancel: its WorkflowExecutionCancelRequested event's identity and reason."""
        handle = self.client.get_workflow_handle(q.workflow_id, run_id=q.run_id)
        async for event in handle.fetch_history_events(rpc_timeout=QUERY_RPC_TIMEOUT):
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED:
                attrs = event.workflow_execution_cancel_requested_event_attributes
                return CancelRequest(found=True, identity=attrs.identity[:MAX_IDENTITY_CHARS],
                                     reason=attrs.cause[:MAX_IDENTITY_CHARS],
                                     by_workflow=attrs.external_workflow_execution.workflow_id)
        return CancelRequest(found=False)

    @activity.defn
    async def cancel_run(self, q: CancelRun) -> None:
        """Request the cancellation of exactly this run (by run id: never a newer run of the same workflow id)."""
        await self.on(q.namespace).get_workflow_handle(q.workflow_id, run_id=q.run_id or None).cancel(
            reason=q.reason, rpc_timeout=SHORT_RPC_TIMEOUT)

    async def claim_elsewhere(self, namespace: str, workflow_id: str) -> str | None:
        """The running run of `workflow_id` in the other namespace this worker serves (than `namespace`), as one line;
        None when none runs there. For claims held by a workflow id, which the server keeps unique per namespace."""
        if self.machinery is None:
            return None
        other = self.client if namespace == self.machinery.namespace else self.machinery
        described = await describe_run(other, workflow_id)
        if described is None or described.status != WorkflowExecutionStatus.RUNNING:
            return None
        return f"{workflow_id} in namespace {other.namespace}, run {described.run_id}"

    @activity.defn
    async def signal_workflow(self, s: PeerSignal) -> bool:
        """Send the signal; False if there is no such workflow running (a signal to an ended run has no one to poke)."""
        try:
            await self.on(s.namespace).get_workflow_handle(s.workflow_id).signal(
                s.signal, s.arg, rpc_timeout=SHORT_RPC_TIMEOUT)
        except RPCError as err:
            if err.status in _GONE:
                return False
            raise
        return True

    @activity.defn
    async def run_is_open(self, run: PeerRun) -> bool:
        """Whether that very run is still running (False if it closed or does not exist)."""
        described = await describe_run(self.on(run.namespace), run.workflow_id, run.run_id)
        return described is not None and described.status == WorkflowExecutionStatus.RUNNING

    @activity.defn
    async def stage_origin(self, q: OriginQuery) -> Origin:
        """Read the rollout's own history for the Nexus operation that started this stage run (activities/origin.py)."""
        return await find_origin(self.client, q)
