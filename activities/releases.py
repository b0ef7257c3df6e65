"""Release activities: find the finished rollout a revert undoes, from Temporal's own records (a revert needs a client).

The answer is read from the server, never from the revert's input: the rollout's request (its start event), its
final state (its result, its failure's details, or the memo an aborted rollout writes before it ends Canceled) and
the versions the service ran before. The revert validates the plain JSON with its own models, as a peer query's
answer is (activities/peers.py).

Provenance: anyone who may act on the namespace can start a `RolloutWorkflow` under any id, on any task queue, with
any search attributes and memo, and terminate it. So the list (visibility) only says which runs to look at; what a
run is comes from its own history (`verified_release`): started on this worker's task queue, run by a worker
(workflow tasks completed), and closed by that worker's own command (Completed, Failed or Canceled, each pointing at
the workflow task that wrote it) with a final state the run's code wrote. A terminated, timed-out or never-polled run
is never a release, and no version counts as one the service ran unless a verified run says so.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
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
from common.problems import show

ROLLOUT_TYPE = "RolloutWorkflow"
REVERT_TYPE = "RevertWorkflow"
# the rollouts' search attributes (declared in workflows/search.py, which activities may not import): hints for
# choosing which histories to read, never evidence (a hand-started run may carry any)
_VERSION = SearchAttributeKey.for_keyword("BifrostVersion")
_STATUS = SearchAttributeKey.for_keyword("BifrostStatus")
MAX_LISTED = 500  # rollouts of one service looked at, newest first
MAX_READ = 20  # histories read for each question: the release, the versions before it, what ran before the oldest

_E = EventType
_CLOSED_BY_WORKER = {  # close events a worker's command writes, and the attribute that holds each
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED: "workflow_execution_completed_event_attributes",
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED: "workflow_execution_failed_event_attributes",
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED: "workflow_execution_canceled_event_attributes",
}
_CLOSED_BY_SERVER = {  # close events no worker wrote: whatever the run did, it left no final state of its own
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED: "was terminated",
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT: "timed out",
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW: "continued as new (a rollout never does)",
}


class ReleaseQuery(BaseModel):
    """Find the release to undo: `rollout_id`, or the service's latest finished rollout.

    With `settled`, a rollout that still runs (one that has given the service lock back and is ending) is waited
    for (the activity retries); without, it is named in `running` and passed over. `to_version`, the version the
    revert goes back to, is looked for first among the earlier rollouts, so it is verified whatever the bounds."""

    service: str
    rollout_id: str | None = None
    settled: bool = False
    to_version: str | None = None


class ReleaseFound(BaseModel):
    """The release and what it knew; `request` and `state` are plain JSON for the workflow's models."""

    found: bool
    problem: str = Field(default="", description="why there is no release to undo (found=False)")
    rollout_id: str = ""
    closed_as: str = ""
    closed_at: datetime | None = None
    request: Any = None
    state: Any = None
    earlier_versions: list[str] = Field(default_factory=list,
                                        description="versions the service ran before the release, from verified histories")
    running: list[str] = Field(default_factory=list, description="rollouts of the service running now")


@dataclass(frozen=True, order=True)
class _Listed:
    """One rollout run the list shows (closed): when, which; its search attributes as hints only."""

    at: datetime
    id: str
    run_id: str
    status_hint: str = ""
    version_hint: str = ""


class ReleaseActivities:
    """Holds the client used to read rollouts' histories and list them."""

    def __init__(self, client: Client) -> None:
        self.client = client

    @activity.defn
    async def find_release(self, q: ReleaseQuery) -> ReleaseFound:
        """The release a revert undoes and the versions the service ran before it."""
        async with heartbeating(f"find the release of {q.service} to undo"):
            return await _Finder(self.client, q, activity.info().task_queue).find()


class _Finder:
    """One search: reads each history at most once (a run may be a candidate release and an earlier version)."""

    def __init__(self, client: Client, q: ReleaseQuery, task_queue: str) -> None:
        self.client, self.q, self.task_queue = client, q, task_queue
        self._read: dict[str, ReleaseFound] = {}

    async def find(self) -> ReleaseFound:
        q = self.q
        closed, running = await self._list()
        if running and q.settled and q.rollout_id is None:
            raise ApplicationError(f"{', '.join(running)} still running (ending after giving the lock back); asked again")
        passed: list[str] = []  # why listed runs were not taken, for the refusal
        found: ReleaseFound | None = None
        at: datetime | None = None
        if q.rollout_id is not None:
            runs = sorted((c for c in closed if c.id == q.rollout_id), reverse=True)
            if not runs:
                return await self._by_id(closed, running)
            for c in runs[:MAX_READ]:  # the newest run of that id Bifrost ran (an id may be started again by hand)
                read = await self.read(c.id, c.run_id)
                if read.found:
                    found, at = read, c.at
                    break
            if found is None:
                first = await self.read(runs[0].id, runs[0].run_id)
                return ReleaseFound(found=False, running=running, problem=f"release: {first.problem}")
        else:  # the latest that changed something: a rollout refused by the lock, or stopped at once, is no release
            for c in sorted(closed, reverse=True)[:MAX_READ]:
                read = await self.read(c.id, c.run_id)
                if not read.found:
                    passed.append(read.problem)
                elif _changed(read.state):
                    found, at = read, c.at
                    break
        if found is None or at is None:
            why = f"; passed over: {'; '.join(passed[:3])}" if passed else ""
            return ReleaseFound(found=False, running=running,
                                problem=f"no finished rollout of {q.service} that changed something: nothing to revert"
                                        + (f" ({', '.join(running)} still runs)" if running else "") + why)
        found.running = running
        found.earlier_versions = sorted(await self._versions_before(closed, at))
        return found

    async def _list(self) -> tuple[list[_Listed], list[str]]:
        """The service's rollouts on this task queue (the list's filter; each history says it again), closed and running."""
        query = (f"WorkflowType = '{ROLLOUT_TYPE}' AND BifrostService = {_quoted(self.q.service)} "
                 f"AND TaskQueue = {_quoted(self.task_queue)}")
        closed: list[_Listed] = []
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
            sa = wf.typed_search_attributes
            closed.append(_Listed(desc.close_time or wf.start_time, wf.id, wf.run_id or "",
                                  sa.get(_STATUS) or "", sa.get(_VERSION) or ""))
        return closed, running

    async def _versions_before(self, closed: list[_Listed], at: datetime) -> set[str]:
        """Versions the service ran before `at`, each from a verified history: those an earlier rollout succeeded with,
        and what its oldest verified rollout replaced. The search attributes only choose which histories to read:
        `to_version` first, then one per version, newest first, at most MAX_READ histories each way."""
        earlier = sorted((c for c in closed if c.at < at), reverse=True)
        by_version: dict[str, list[_Listed]] = {}
        for c in earlier:
            if c.status_hint == "succeeded" and c.version_hint:
                by_version.setdefault(c.version_hint, []).append(c)
        order = sorted(by_version, key=lambda v: v != self.q.to_version)  # stable: otherwise newest first
        versions: set[str] = set()
        budget = MAX_READ
        for version in order:
            for c in by_version[version]:
                if budget <= 0:
                    break
                budget -= 1
                read = await self.read(c.id, c.run_id)
                if read.found and _succeeded_with(read) == version:
                    versions.add(version)
                    break
        for c in list(reversed(earlier))[:MAX_READ]:  # what the service ran before its oldest rollout Bifrost ran
            read = await self.read(c.id, c.run_id)
            if read.found:
                stages = read.state.get("stages", []) if isinstance(read.state, dict) else []
                versions |= {s["version_before"] for s in stages
                             if isinstance(s, dict) and isinstance(s.get("version_before"), str)}
                break
        return versions

    async def _by_id(self, closed: list[_Listed], running: list[str]) -> ReleaseFound:
        """A release named by id that the list does not show (yet): read it directly, if it is a finished rollout of the service."""
        rollout_id = self.q.rollout_id
        assert rollout_id is not None
        try:
            desc = await self.client.get_workflow_handle(rollout_id).describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return ReleaseFound(found=False, problem=f"release: no rollout {rollout_id!r}", running=running)
            raise
        if desc.workflow_type != ROLLOUT_TYPE:
            return ReleaseFound(found=False, problem=f"release: {rollout_id!r} is a {desc.workflow_type}, not a rollout")
        if desc.status == WorkflowExecutionStatus.RUNNING:
            return ReleaseFound(found=False, running=running,
                                problem=f"release: {rollout_id} is still running; stop it with `bifrost rollback` instead")
        found = await self.read(rollout_id, desc.run_id)
        if not found.found:
            return ReleaseFound(found=False, running=running, problem=f"release: {found.problem}")
        found.running = running
        # what ran before it, from the list (it may lag: then only the versions this release replaced count)
        found.earlier_versions = sorted(await self._versions_before(closed, found.closed_at or datetime.now(UTC)))
        return found

    async def read(self, rollout_id: str, run_id: str) -> ReleaseFound:
        """One run's history, verified (found=False with the problem otherwise); each run read once per search."""
        key = f"{rollout_id}\0{run_id}"
        if key not in self._read:
            history = await self.client.get_workflow_handle(rollout_id, run_id=run_id or None).fetch_history()
            self._read[key] = verified_release(history.events, rollout_id=rollout_id, service=self.q.service,
                                               task_queue=self.task_queue)
        return self._read[key]


def verified_release(events: Iterable[Any], *, rollout_id: str, service: str, task_queue: str) -> ReleaseFound:
    """A rollout run read from its own history: its request and the final state its own code wrote, or found=False and
    why it is no release (not a rollout of this service on this task queue, never run by a worker, closed by the server,
    or with no final state of its own). Pure: events are the protobuf messages the client returns."""
    events = list(events)
    request: Any = None
    state: Any = None
    closed_as = ""
    closed_at: datetime | None = None
    task_ids: set[int] = set()  # WorkflowTaskCompleted events: a worker polled this run and answered
    closing: Any = None

    def no(why: str) -> ReleaseFound:
        return ReleaseFound(found=False, rollout_id=rollout_id, problem=f"{rollout_id} {why}", request=request)

    if not events or events[0].event_type != _E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        return no("has no start event")
    started = events[0].workflow_execution_started_event_attributes
    if started.workflow_type.name != ROLLOUT_TYPE:
        return no(f"is a {show(started.workflow_type.name)}, not a rollout")
    if started.task_queue.name != task_queue:
        return no(f"was started on task queue {show(started.task_queue.name)}, not this worker's {show(task_queue)}: "
                  "no Bifrost worker of this deployment ran it")
    request = payload_json(started.input.payloads)
    for event in events[1:]:
        kind = event.event_type
        if kind == _E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            task_ids.add(event.event_id)
        elif kind in _CLOSED_BY_WORKER or kind in _CLOSED_BY_SERVER:
            closing = event
            if event.HasField("event_time"):
                closed_at = event.event_time.ToDatetime(tzinfo=UTC)
    if not task_ids:
        return no("was never run by a worker (no workflow task completed): it is not a rollout Bifrost ran")
    if closing is None:
        return no("has not ended")
    if closing.event_type in _CLOSED_BY_SERVER:
        return no(f"{_CLOSED_BY_SERVER[closing.event_type]}: Bifrost wrote no final state for it, so what it changed "
                  "is unknown; name the release before it with --release, or roll forward with a new rollout")
    attrs = getattr(closing, _CLOSED_BY_WORKER[closing.event_type])
    if attrs.workflow_task_completed_event_id not in task_ids:
        return no("was not closed by its worker")
    if closing.event_type == _E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
        state, closed_as = payload_json(attrs.result.payloads), "succeeded"
    elif closing.event_type == _E.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
        state = payload_json(attrs.failure.application_failure_info.details.payloads)
        closed_as = attrs.failure.application_failure_info.type or "failed"
    else:  # Canceled carries no details: an aborted rollout wrote its final state to the memo right before
        # (the run's own upsert, never a memo given at start: common/own_memo.py)
        state, closed_as = own_canceled_state(events), "canceled"
    if not isinstance(state, dict) or not isinstance(request, dict):
        return no(f"ended {closed_as} without a final state (its input was refused, or it stopped before it began)")
    if state.get("service") != service:
        return no("is a rollout of another service")
    if state.get("rollout_id") != rollout_id:
        return no("has a final state that names another rollout")
    return ReleaseFound(found=True, rollout_id=rollout_id, closed_as=closed_as, closed_at=closed_at, request=request,
                        state=state)


def _changed(state: Any) -> bool:
    """Whether a rollout's final state (written by its own code) shows a stage it changed."""
    if not isinstance(state, dict):
        return False  # no final state of its own: never a release (verified_release refuses it before this)
    stages = state.get("stages") or []
    return any(isinstance(s, dict) and s.get("version_now") is not None and s.get("version_now") != s.get("version_before")
               for s in stages)


def _succeeded_with(found: ReleaseFound) -> str | None:
    """The version a verified rollout succeeded with (Completed, its own state says succeeded), else None."""
    state = found.state
    if found.closed_as == "succeeded" and isinstance(state, dict) and state.get("status") == "succeeded" \
            and isinstance(state.get("version"), str):
        return str(state["version"])
    return None


def _quoted(value: str) -> str:
    """A string literal for a visibility query."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class RevertRecord(BaseModel):
    """A revert that put a release back, as its own history says: which revert, which release, to what, when, who."""

    revert_id: str
    release: str
    to_version: str
    requested_by: str = ""
    reason: str = ""
    ended_at: datetime | None = None


def verified_revert(events: Iterable[Any], *, revert_id: str, task_queue: str) -> RevertRecord | None:
    """A revert run read from its own history: a RevertWorkflow started on `task_queue`, Completed by its worker's own
    command with the state its code wrote saying `reverted` and naming the release; None for anything else (a run
    started by hand on another queue, terminated, failed or aborted, or one whose state says otherwise). A search
    attribute or memo is never read: anyone may set them. Pure: events are the protobuf messages the client returns."""
    events = list(events)
    if not events or events[0].event_type != _E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        return None
    started = events[0].workflow_execution_started_event_attributes
    if started.workflow_type.name != REVERT_TYPE or started.task_queue.name != task_queue:
        return None
    task_ids = {e.event_id for e in events if e.event_type == _E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED}
    closing = events[-1]
    if closing.event_type != _E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
        return None
    attrs = closing.workflow_execution_completed_event_attributes
    if attrs.workflow_task_completed_event_id not in task_ids:
        return None
    state = payload_json(attrs.result.payloads)
    if not isinstance(state, dict) or state.get("phase") != "reverted" or state.get("revert_id") != revert_id:
        return None
    release, to_version = state.get("release"), state.get("to_version")
    if not isinstance(release, str) or not isinstance(to_version, str):
        return None
    ended = closing.event_time.ToDatetime(tzinfo=UTC) if closing.HasField("event_time") else None
    return RevertRecord(revert_id=revert_id, release=release, to_version=to_version,
                        requested_by=str(state.get("requested_by") or ""), reason=str(state.get("request_reason") or ""),
                        ended_at=ended)
