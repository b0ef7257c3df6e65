"""Read what a rollout left in Temporal: every history of every run it touched, and its critical path.

Shared by the benchmarks. It uses only the public client API and the history events, so it measures
whatever the workflows do: children, signals to and from the service lock, and continue-as-new chains
(every run of a workflow id is fetched, following `new_execution_run_id`).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections import Counter
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import History, HistoryEvent
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

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


@dataclass
class Run:
    """One run of one workflow id: its events (event_id i is events[i - 1]) and its size as the server counts it."""

    workflow_id: str
    run_id: str
    events: list[HistoryEvent]
    size_bytes: int

    def event(self, event_id: int) -> HistoryEvent:
        return self.events[event_id - 1]

    @property
    def started(self) -> HistoryEvent:
        return self.events[0]

    @property
    def workflow_type(self) -> str:
        return self.started.workflow_execution_started_event_attributes.workflow_type.name


@dataclass
class Tree:
    """Every run of every workflow a rollout reached, by workflow id, oldest run first."""

    runs: dict[str, list[Run]] = field(default_factory=dict)

    def all_runs(self) -> Iterable[Run]:
        for chain in self.runs.values():
            yield from chain

    def count(self, *types: EventType.ValueType) -> int:
        return sum(1 for r in self.all_runs() for e in r.events if e.event_type in types)

    def run(self, workflow_id: str, run_id: str) -> Run:
        chain = self.runs[workflow_id]
        return next((r for r in chain if r.run_id == run_id), chain[-1])


async def fetch_run(client: Client, workflow_id: str, run_id: str | None = None) -> Run:
    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    events = list(history.events)
    rid = run_id or history.run_id
    return Run(workflow_id, rid, events, History(events=events).ByteSize())


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


def _referenced(run: Run) -> set[str]:
    """Workflow ids this run started as children, signalled, or was signalled by."""
    out = set()
    for e in run.events:
        if e.event_type == E.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            out.add(e.start_child_workflow_execution_initiated_event_attributes.workflow_id)
        elif e.event_type == E.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
            out.add(e.signal_external_workflow_execution_initiated_event_attributes.workflow_execution.workflow_id)
        elif e.event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            out.add(e.workflow_execution_signaled_event_attributes.external_workflow_execution.workflow_id)
    out.discard("")
    return out


async def fetch_tree(client: Client, root_id: str, concurrency: int = 16) -> Tree:
    """The root's runs and, transitively, those of every workflow it started or exchanged signals with."""
    tree = Tree()
    gate = asyncio.Semaphore(concurrency)
    todo = {root_id}
    while todo:
        async def one(wid: str) -> list[Run]:
            async with gate:
                return await fetch_chain(client, wid)
        chains = await asyncio.gather(*(one(w) for w in sorted(todo)))
        for wid, chain in zip(sorted(todo), chains):
            tree.runs[wid] = chain
        todo = {ref for chain in chains for r in chain for ref in _referenced(r)} - tree.runs.keys()
    return tree


@dataclass
class CriticalPath:
    """The chain of causes that ended the root workflow, walked back to its start, and where its time went."""

    workflow_tasks: int = 0  # completed workflow tasks on the path: one server round trip each
    timed_out_tasks: int = 0
    activities: int = 0
    by_type: Counter[str] = field(default_factory=Counter)  # activity types on the path
    activity_seconds: Counter[str] = field(default_factory=Counter)  # their run time (start to close), by type
    seconds: Counter[str] = field(default_factory=Counter)  # where the path's time went
    span: float = 0.0  # root start to root close, on the server's clock
    approximations: int = 0  # steps whose cause came from outside the workflows (a client or an activity)
    steps: list[tuple[float, str, int, str]] = field(default_factory=list)  # (time, workflow id, event id, type), last first


def critical_path(tree: Tree, root_id: str) -> CriticalPath:
    """Walk back from the root's close event through the events that caused each other (see module doc)."""
    out = CriticalPath()
    root = tree.runs[root_id][-1]
    end = root.events[-1]
    out.span = ts(end) - ts(tree.runs[root_id][0].started)
    run, e = root, end
    guard = 0
    while True:
        guard += 1
        if guard > 100_000:
            raise RuntimeError("critical path walk did not end")
        t = e.event_type
        out.steps.append((ts(e), run.workflow_id, e.event_id, EventType.Name(t).removeprefix("EVENT_TYPE_")))
        if t in CLOSE_EVENTS:
            attrs = getattr(e, e.WhichOneof("attributes"))
            wft = getattr(attrs, "workflow_task_completed_event_id", 0)
            if not wft:
                break
            e = run.event(wft)
        elif t in WFT_ENDS:
            a = (e.workflow_task_completed_event_attributes if t == E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
                 else e.workflow_task_timed_out_event_attributes if t == E.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
                 else e.workflow_task_failed_event_attributes)
            scheduled = run.event(a.scheduled_event_id)
            if a.started_event_id:
                started = run.event(a.started_event_id)
                out.seconds["workflow task waits for a worker (schedule to start)"] += ts(started) - ts(scheduled)
                out.seconds["workflow task runs on the worker (start to complete)"] += ts(e) - ts(started)
            if t == E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                out.workflow_tasks += 1
            else:
                out.timed_out_tasks += 1
            cause = _woken_by(run, scheduled)
            last_task = next((x for x in reversed(run.events[:scheduled.event_id - 1]) if x.event_type in WFT_ENDS), None)
            if last_task is not None and cause is not last_task and ts(last_task) > ts(cause):
                out.seconds["server: event held until the running workflow task ended"] += ts(last_task) - ts(cause)
                out.seconds["server: event to next task"] += ts(scheduled) - ts(last_task)
            else:
                out.seconds["server: event to next task"] += ts(scheduled) - ts(cause)
            e = cause
        elif t in ACTIVITY_ENDS:
            attrs = getattr(e, e.WhichOneof("attributes"))
            scheduled = run.event(attrs.scheduled_event_id)
            a = scheduled.activity_task_scheduled_event_attributes
            out.activities += 1
            out.by_type[a.activity_type.name] += 1
            if attrs.started_event_id:
                started = run.event(attrs.started_event_id)
                out.seconds["activity waits for a worker (schedule to start)"] += ts(started) - ts(scheduled)
                out.seconds["activity runs (start to close)"] += ts(e) - ts(started)
                out.activity_seconds[a.activity_type.name] += ts(e) - ts(started)
            else:
                out.seconds["activity (no start recorded)"] += ts(e) - ts(scheduled)
            out.seconds["server: task end to next command"] += ts(scheduled) - ts(run.event(a.workflow_task_completed_event_id))
            e = run.event(a.workflow_task_completed_event_id)
        elif t in CHILD_ENDS:
            attrs = getattr(e, e.WhichOneof("attributes"))
            child = tree.runs.get(attrs.workflow_execution.workflow_id)
            if not child:
                break
            out.seconds["server: child closed to parent event"] += ts(e) - ts(child[-1].events[-1])
            run, e = child[-1], child[-1].events[-1]
        elif t == E.EVENT_TYPE_TIMER_FIRED:
            started = run.event(e.timer_fired_event_attributes.started_event_id)
            out.seconds["timers"] += ts(e) - ts(started)
            e = run.event(started.timer_started_event_attributes.workflow_task_completed_event_id)
        elif t == E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            a = e.workflow_execution_started_event_attributes
            if a.continued_execution_run_id:
                chain = tree.runs[run.workflow_id]
                idx = next(i for i, r in enumerate(chain) if r.run_id == run.run_id)
                if idx == 0:  # the earlier run was not fetched
                    break
                run, e = chain[idx - 1], chain[idx - 1].events[-1]
                e = run.event(e.workflow_execution_continued_as_new_event_attributes.workflow_task_completed_event_id)
            elif a.parent_workflow_execution.workflow_id and a.parent_workflow_execution.workflow_id in tree.runs:
                parent = tree.run(a.parent_workflow_execution.workflow_id, a.parent_workflow_execution.run_id)
                initiated = parent.event(a.parent_initiated_event_id)
                out.seconds["server: child initiated to child started"] += ts(e) - ts(initiated)
                run = parent
                e = parent.event(initiated.start_child_workflow_execution_initiated_event_attributes.workflow_task_completed_event_id)
            elif run.workflow_id == root_id:
                break
            else:
                found = _external_cause(tree, e, out)
                if found is None:
                    break
                run, e = found
        elif t == E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            a = e.workflow_execution_signaled_event_attributes
            sender = a.external_workflow_execution.workflow_id
            sent = [(r, x) for r in tree.runs.get(sender, []) for x in r.events
                    if x.event_type == E.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED
                    and x.signal_external_workflow_execution_initiated_event_attributes.signal_name == a.signal_name
                    and x.signal_external_workflow_execution_initiated_event_attributes.workflow_execution.workflow_id == run.workflow_id
                    and ts(x) <= ts(e)]
            if sent:
                sender_run, initiated = max(sent, key=lambda p: ts(p[1]))
                out.seconds["server: signal sent to signal received"] += ts(e) - ts(initiated)
                run = sender_run
                e = sender_run.event(initiated.signal_external_workflow_execution_initiated_event_attributes.workflow_task_completed_event_id)
            else:
                found = _external_cause(tree, e, out)
                if found is None:
                    break
                run, e = found
        elif t == E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED:
            initiated = run.event(e.child_workflow_execution_started_event_attributes.initiated_event_id)
            out.seconds["server: child initiated to child started"] += ts(e) - ts(initiated)
            e = run.event(initiated.start_child_workflow_execution_initiated_event_attributes.workflow_task_completed_event_id)
        elif t == E.EVENT_TYPE_EXTERNAL_WORKFLOW_EXECUTION_SIGNALED:
            initiated = run.event(e.external_workflow_execution_signaled_event_attributes.initiated_event_id)
            out.seconds["server: signal sent to signal received"] += ts(e) - ts(initiated)
            e = run.event(initiated.signal_external_workflow_execution_initiated_event_attributes.workflow_task_completed_event_id)
        else:
            found = _external_cause(tree, e, out)
            if found is None:
                break
            run, e = found
    return out


NOT_TRIGGERS = {E.EVENT_TYPE_ACTIVITY_TASK_STARTED, E.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, E.EVENT_TYPE_WORKFLOW_TASK_STARTED}


def _woken_by(run: Run, scheduled: HistoryEvent) -> HistoryEvent:
    """What made the server schedule this workflow task: the latest event that arrived since the previous task
    ended (buffered while it ran, or after it), else the previous task itself (a failed or timed-out attempt,
    or one that asked for another task)."""
    last_task = next((x for x in reversed(run.events[:scheduled.event_id - 1]) if x.event_type in WFT_ENDS), None)
    first = last_task.event_id + 1 if last_task is not None else 1
    arrived = []
    for x in run.events[first - 1:scheduled.event_id - 1]:
        if x.event_type in NOT_TRIGGERS:
            continue
        attrs = getattr(x, x.WhichOneof("attributes"))
        if last_task is not None and getattr(attrs, "workflow_task_completed_event_id", 0) == last_task.event_id:
            continue  # a command of the previous task, not something that arrived
        arrived.append(x)
    if arrived:
        return max(arrived, key=ts)
    return last_task if last_task is not None else run.events[0]


def _external_cause(tree: Tree, e: HistoryEvent, out: CriticalPath) -> tuple[Run, HistoryEvent] | None:
    """An event a client or an activity caused (a signal-with-start from an activity, an update): continue from
    the latest activity that had started before it, in any of the tree's histories. None at the very start."""
    best: tuple[Run, HistoryEvent, HistoryEvent] | None = None
    for r in tree.all_runs():
        for x in r.events:
            if x.event_type != E.EVENT_TYPE_ACTIVITY_TASK_STARTED or ts(x) > ts(e):
                continue
            if best is None or ts(x) > ts(best[2]):
                best = (r, r.event(x.activity_task_started_event_attributes.scheduled_event_id), x)
    if best is None:
        return None
    r, scheduled, started = best
    out.approximations += 1
    out.activities += 1
    out.by_type[scheduled.activity_task_scheduled_event_attributes.activity_type.name] += 1
    out.seconds["activity waits for a worker (schedule to start)"] += ts(started) - ts(scheduled)
    out.seconds["activity runs (start to close)"] += ts(e) - ts(started)
    out.activity_seconds[scheduled.activity_task_scheduled_event_attributes.activity_type.name] += ts(e) - ts(started)
    wft = r.event(scheduled.activity_task_scheduled_event_attributes.workflow_task_completed_event_id)
    out.seconds["server: task end to next command"] += ts(scheduled) - ts(wft)
    return r, wft


def run_main(coro: Coroutine[Any, Any, None]) -> None:
    """asyncio.run, then leave without interpreter finalization, where the SDK's runtime threads can abort the
    process after the work is done (temporalio/sdk-python#300, "PyGILState_Release: thread state ... must be
    current"): `make bench` must not fail on a benchmark that succeeded. Errors still raise as usual."""
    asyncio.run(coro)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
