"""Release activities: find the finished rollout a revert undoes, from Temporal's own records (a revert needs a client).

The answer is read from the server, never from the revert's input: the rollout's request (its start event), its
final state (its result, its failure's details, or the memo an aborted rollout writes before it ends Canceled) and
the versions the service ran before. The revert validates the plain JSON with its own models, as a peer query's
answer is (activities/peers.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import SearchAttributeKey
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from activities.heartbeat import heartbeating
from common.own_memo import own_canceled_state, payload_json
from common.types import INVALID_REQUEST

ROLLOUT_TYPE = "RolloutWorkflow"
# the rollouts' search attributes (declared in workflows/search.py, which activities may not import)
_VERSION = SearchAttributeKey.for_keyword("BifrostVersion")
_STATUS = SearchAttributeKey.for_keyword("BifrostStatus")
MAX_LISTED = 500  # rollouts of one service looked at, newest first
MAX_READ = 20  # finished rollouts read (newest first) to find the latest that changed something


class ReleaseQuery(BaseModel):
    """Find the release to undo: `rollout_id`, or the service's latest finished rollout.

    With `settled`, a rollout that still runs (one that has given the service lock back and is ending) is waited
    for (the activity retries); without, it is named in `running` and passed over."""

    service: str
    rollout_id: str | None = None
    settled: bool = False


class ReleaseFound(BaseModel):
    """The release and what it knew; `request` and `state` are plain JSON for the workflow's models."""

    found: bool
    problem: str = Field(default="", description="why there is no release to undo (found=False)")
    rollout_id: str = ""
    closed_as: str = ""
    closed_at: datetime | None = None
    request: Any = None
    state: Any = None
    earlier_versions: list[str] = Field(default_factory=list, description="versions of the service's earlier succeeded rollouts")
    running: list[str] = Field(default_factory=list, description="rollouts of the service running now")


class ReleaseActivities:
    """Holds the client used to read rollouts' histories and list them."""

    def __init__(self, client: Client) -> None:
        self.client = client

    @activity.defn
    async def find_release(self, q: ReleaseQuery) -> ReleaseFound:
        """The release a revert undoes and the versions the service ran before it."""
        async with heartbeating(f"find the release of {q.service} to undo"):
            return await self._find(q)

    async def _find(self, q: ReleaseQuery) -> ReleaseFound:
        query = f"WorkflowType = '{ROLLOUT_TYPE}' AND BifrostService = '{q.service}'"
        closed: list[tuple[datetime, str, str]] = []  # (closed at, id, run id)
        earlier: dict[str, datetime] = {}
        running: list[str] = []
        n = 0
        async for wf in self.client.list_workflows(query):
            n += 1
            if n > MAX_LISTED:
                break
            desc = wf
            if wf.status == WorkflowExecutionStatus.RUNNING:  # the list may lag: ask the run itself
                desc = await self.client.get_workflow_handle(wf.id, run_id=wf.run_id).describe()
                if desc.status == WorkflowExecutionStatus.RUNNING:
                    running.append(wf.id)
                    continue
            at = desc.close_time or wf.start_time
            closed.append((at, wf.id, wf.run_id or ""))
            sa = wf.typed_search_attributes
            status, version = sa.get(_STATUS), sa.get(_VERSION)
            if status == "succeeded" and version:
                earlier[version] = at
        if running and q.settled and q.rollout_id is None:
            raise ApplicationError(f"{', '.join(running)} still running (ending after giving the lock back); asked again")
        found: ReleaseFound | None = None
        if q.rollout_id is not None:
            picked = [c for c in closed if c[1] == q.rollout_id]
            if not picked:
                return await self._by_id(q, running)
            found = await self._read(picked[0][1], picked[0][2])
        else:  # the latest that changed something: a rollout refused by the lock, or stopped at once, is no release
            picked = sorted(closed, reverse=True)
            for i, (_, rid, run_id) in enumerate(picked[:MAX_READ]):
                found = await self._read(rid, run_id)
                if _changed(found.state):
                    picked = picked[i:]
                    break
            else:
                found = None
        if found is None or not picked:
            return ReleaseFound(found=False, running=running,
                                problem=f"no finished rollout of {q.service} that changed something: nothing to revert"
                                        + (f" ({', '.join(running)} still runs)" if running else ""))
        at = picked[0][0]
        found.running = running
        versions = {v for v, t in earlier.items() if t < at}
        older = sorted(c for c in closed if c[0] < at)
        if older:  # what the service ran before its oldest rollout listed: versions from before Bifrost count too
            first = await self._read(older[0][1], older[0][2])
            stages = first.state.get("stages", []) if isinstance(first.state, dict) else []
            versions |= {s["version_before"] for s in stages if isinstance(s, dict) and s.get("version_before")}
        found.earlier_versions = sorted(versions)
        return found

    async def _by_id(self, q: ReleaseQuery, running: list[str]) -> ReleaseFound:
        """A release named by id that the list does not show (yet): read it directly, if it is a finished rollout of the service."""
        assert q.rollout_id is not None
        try:
            desc = await self.client.get_workflow_handle(q.rollout_id).describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return ReleaseFound(found=False, problem=f"release: no rollout {q.rollout_id!r}", running=running)
            raise
        if desc.workflow_type != ROLLOUT_TYPE:
            return ReleaseFound(found=False, problem=f"release: {q.rollout_id!r} is a {desc.workflow_type}, not a rollout")
        if desc.status == WorkflowExecutionStatus.RUNNING:
            return ReleaseFound(found=False, running=running,
                                problem=f"release: {q.rollout_id} is still running; stop it with `bifrost rollback` instead")
        found = await self._read(q.rollout_id, desc.run_id)
        if isinstance(found.request, dict) and found.request.get("service") != q.service:
            return ReleaseFound(found=False, problem=f"release: {q.rollout_id} is a rollout of another service")
        found.running = running
        return found

    async def _read(self, rollout_id: str, run_id: str) -> ReleaseFound:
        """The rollout's request (start event) and final state (result, failure's details, or memo if Canceled)."""
        history = await self.client.get_workflow_handle(rollout_id, run_id=run_id or None).fetch_history()
        request: Any = None
        state: Any = None
        closed_as = ""
        closed_at: datetime | None = None
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
                request = payload_json(event.workflow_execution_started_event_attributes.input.payloads)
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
                state, closed_as = payload_json(event.workflow_execution_completed_event_attributes.result.payloads), "succeeded"
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
                failure = event.workflow_execution_failed_event_attributes.failure
                state = payload_json(failure.application_failure_info.details.payloads)
                closed_as = failure.application_failure_info.type or "failed"
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED:
                # Canceled carries no details: an aborted rollout wrote its final state to the memo right before
                # (the run's own upsert, never a memo given at start: common/own_memo.py)
                state, closed_as = own_canceled_state(history.events), "canceled"
            elif event.event_type in (EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
                                      EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT):
                closed_as = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_WORKFLOW_EXECUTION_").lower()
            if event.HasField("event_time"):
                closed_at = event.event_time.ToDatetime(tzinfo=UTC)
        if request is None:
            raise ApplicationError(f"{rollout_id}: its start event holds no request", type=INVALID_REQUEST, non_retryable=True)
        return ReleaseFound(found=True, rollout_id=rollout_id, closed_as=closed_as, closed_at=closed_at, request=request,
                            state=state)


def _changed(state: Any) -> bool:
    """Whether a rollout's final state shows a stage it changed (no state: it was terminated, so it may have)."""
    if not isinstance(state, dict):
        return True
    stages = state.get("stages") or []
    return any(isinstance(s, dict) and s.get("version_now") is not None and s.get("version_now") != s.get("version_before")
               for s in stages)
