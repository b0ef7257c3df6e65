"""Read what a rollout left in Temporal: every history of every run it touched, in both namespaces.

Shared by the benchmarks (benchmarks/critical_path.py walks what this reads). It uses only the public client API
and the history events, so it measures whatever the workflows do: children, Nexus operations (a rollout's stages
in the machinery namespace, found by the link on NexusOperationStarted), signals sent directly or by a
`signal_workflow` activity across namespaces (found by the activity's input), and continue-as-new chains (every
run of a workflow id is fetched, following `new_execution_run_id`).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import History, HistoryEvent
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common.namespaces import home_namespace, machinery_namespace  # noqa: E402
from worker.server import DEV_SERVER_FLAGS, namespace_args  # noqa: E402
from workflows import search  # noqa: E402

E = EventType
TEMPORAL = str(Path(sys.executable).parent / "temporal")
CLOSE_EVENTS = {
    E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, E.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
    E.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED, E.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
    E.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT, E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
}
WFT_ENDS = {E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, E.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT, E.EVENT_TYPE_WORKFLOW_TASK_FAILED}
ACTIVITY_ENDS = {
    E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, E.EVENT_TYPE_ACTIVITY_TASK_FAILED,
    E.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT, E.EVENT_TYPE_ACTIVITY_TASK_CANCELED,
}
CHILD_ENDS = {
    E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED, E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_FAILED,
    E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_CANCELED, E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TERMINATED,
    E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TIMED_OUT,
}


async def dev_server(*extra: str, time_skipping: bool = False, with_fix: bool = True,
                     max_skips: int = 0) -> WorkflowEnvironment:
    """A local dev server like the test fixtures': Bifrost's search attributes and, unless told not to, DEV_SERVER_FLAGS.

    With time skipping, the server stops skipping a workflow's timers after a default number of skips per
    session (about 200 were seen: a soak of 1-minute looks stalled after 3.5 virtual hours); `max_skips` raises it."""
    from temporalio.testing import TimeSkippingConfig

    from worker.converter import DATA_CONVERTER

    args = [*(DEV_SERVER_FLAGS if with_fix else []), *namespace_args("default"), *extra]  # + the machinery namespace
    if time_skipping:
        return await WorkflowEnvironment.start_time_skipping_v2(
            ts_config=TimeSkippingConfig(max_session_skip_count=max_skips),
            dev_server_existing_path=TEMPORAL, search_attributes=search.ALL, data_converter=DATA_CONVERTER,
            dev_server_extra_args=["--dynamic-config-value", "frontend.WorkflowTimeSkippingEnabled=true", *args],
        )
    return await WorkflowEnvironment.start_local(
        dev_server_existing_path=TEMPORAL, search_attributes=search.ALL, data_converter=DATA_CONVERTER,
        dev_server_extra_args=args,
    )


def ts(event: HistoryEvent) -> float:
    return event.event_time.ToDatetime().timestamp()


Key = tuple[str, str]  # (namespace, workflow id): `traffic/<service>` may run in both namespaces
SIGNAL_ACTIVITIES = frozenset({"signal_workflow"})  # PeerActivities.signal_workflow: a signal across namespaces
NEXUS_ENDS = {
    E.EVENT_TYPE_NEXUS_OPERATION_COMPLETED, E.EVENT_TYPE_NEXUS_OPERATION_FAILED,
    E.EVENT_TYPE_NEXUS_OPERATION_CANCELED, E.EVENT_TYPE_NEXUS_OPERATION_TIMED_OUT,
}


@dataclass
class Run:
    """One run of one workflow id in one namespace: its events (event_id i is events[i - 1]) and its size."""

    namespace: str
    workflow_id: str
    run_id: str
    events: list[HistoryEvent]
    size_bytes: int

    def event(self, event_id: int) -> HistoryEvent:
        return self.events[event_id - 1]

    @property
    def key(self) -> Key:
        return self.namespace, self.workflow_id

    @property
    def started(self) -> HistoryEvent:
        return self.events[0]

    @property
    def workflow_type(self) -> str:
        return self.started.workflow_execution_started_event_attributes.workflow_type.name


@dataclass
class Tree:
    """Every run of every workflow a rollout reached, in either namespace, by (namespace, workflow id), oldest first."""

    root: Key
    runs: dict[Key, list[Run]] = field(default_factory=dict)

    def all_runs(self) -> Iterable[Run]:
        for chain in self.runs.values():
            yield from chain

    def count(self, *types: EventType.ValueType) -> int:
        return sum(1 for r in self.all_runs() for e in r.events if e.event_type in types)

    def chain(self, key: Key) -> list[Run]:
        return self.runs.get(key, [])

    def run(self, key: Key, run_id: str) -> Run:
        chain = self.runs[key]
        return next((r for r in chain if r.run_id == run_id), chain[-1])

    @property
    def root_chain(self) -> list[Run]:
        return self.runs[self.root]


def handler_of(started: HistoryEvent) -> tuple[str, str, str] | None:
    """The workflow run a Nexus operation started, from its NexusOperationStarted event's link: (namespace, workflow
    id, run id); None for an operation that started no workflow."""
    for link in started.links:
        if link.HasField("workflow_event") and link.workflow_event.workflow_id:
            w = link.workflow_event
            return w.namespace, w.workflow_id, w.run_id
    return None


def signal_target(namespace: str, scheduled: HistoryEvent) -> tuple[str, str, str] | None:
    """Who a `signal_workflow` activity signals, read from its input (PeerSignal, plain JSON): (namespace, workflow id,
    signal). `namespace` is the sending run's: a PeerSignal without one goes to its home namespace. None for any
    other activity, or an input that is not a PeerSignal."""
    a = scheduled.activity_task_scheduled_event_attributes
    if a.activity_type.name not in SIGNAL_ACTIVITIES or not a.input.payloads:
        return None
    try:
        body = json.loads(a.input.payloads[0].data)
    except ValueError:
        return None
    if not isinstance(body, dict) or not body.get("workflow_id") or not body.get("signal"):
        return None
    return str(body.get("namespace") or home_namespace(namespace)), str(body["workflow_id"]), str(body["signal"])


async def fetch_run(client: Client, workflow_id: str, run_id: str | None = None) -> Run:
    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    events = list(history.events)
    rid = run_id or history.run_id
    return Run(client.namespace, workflow_id, rid, events, History(events=events).ByteSize())


async def fetch_chain(client: Client, workflow_id: str) -> list[Run]:
    """Every run of `workflow_id` from its first, following continue-as-new to the latest."""
    latest = await fetch_run(client, workflow_id)
    first = latest.started.workflow_execution_started_event_attributes.first_execution_run_id or latest.run_id
    chain = [latest] if first == latest.run_id else [await fetch_run(client, workflow_id, first)]
    while chain[-1].run_id != latest.run_id:
        last = chain[-1].events[-1]
        nxt = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id \
            if last.event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW else ""
        if not nxt:
            break
        chain.append(latest if nxt == latest.run_id else await fetch_run(client, workflow_id, nxt))
    return chain


def referenced(run: Run) -> set[Key]:
    """Workflows this run started (as children or Nexus operations), signalled (directly or by a `signal_workflow`
    activity), or was signalled by, as (namespace, workflow id)."""
    out: set[Key] = set()
    for e in run.events:
        if e.event_type == E.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            a = e.start_child_workflow_execution_initiated_event_attributes
            out.add((a.namespace or run.namespace, a.workflow_id))
        elif e.event_type == E.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
            s = e.signal_external_workflow_execution_initiated_event_attributes
            out.add((s.namespace or run.namespace, s.workflow_execution.workflow_id))
        elif e.event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            out.add((run.namespace, e.workflow_execution_signaled_event_attributes.external_workflow_execution.workflow_id))
        elif e.event_type == E.EVENT_TYPE_NEXUS_OPERATION_STARTED and (handler := handler_of(e)):
            out.add(handler[:2])
        elif e.event_type == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED and (target := signal_target(run.namespace, e)):
            out.add(target[:2])
    return {k for k in out if k[1]}


def namespace_clients(client: Client) -> dict[str, Client]:
    """`client`'s namespace and its machinery namespace (stages, their reports and evacuations, the service lock),
    each with a client on the same connection, by name: the one way a benchmark reaches both."""
    from worker.endpoints import machinery_client

    clients = {client.namespace: client}
    if machinery_namespace(client.namespace) != client.namespace:
        clients[machinery_namespace(client.namespace)] = machinery_client(client)
    return clients


def stage_client(client: Client) -> Client:
    """The client for where `client`'s rollouts run their stages, their reports and the service lock."""
    return namespace_clients(client)[machinery_namespace(client.namespace)]


async def fetch_tree(client: Client, root_id: str, concurrency: int = 16) -> Tree:
    """The root's runs and, transitively, those of every workflow it started or exchanged signals with, in the
    client's namespace and its machinery namespace (workflows elsewhere are left out)."""
    clients = namespace_clients(client)
    tree = Tree(root=(client.namespace, root_id))
    gate = asyncio.Semaphore(concurrency)
    todo = {tree.root}
    while todo:
        async def one(key: Key) -> list[Run]:
            async with gate:
                return await fetch_chain(clients[key[0]], key[1])
        keys = sorted(todo)
        chains = await asyncio.gather(*(one(k) for k in keys))
        tree.runs.update(zip(keys, chains))
        todo = {ref for chain in chains for r in chain for ref in referenced(r) if ref[0] in clients} - tree.runs.keys()
    return tree


def run_main(coro: Coroutine[Any, Any, None]) -> None:
    """asyncio.run, then leave without interpreter finalization, where the SDK's runtime threads can abort the
    process after the work is done (temporalio/sdk-python#300, "PyGILState_Release: thread state ... must be
    current"): `make bench` must not fail on a benchmark that succeeded. Errors still raise as usual."""
    asyncio.run(coro)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
