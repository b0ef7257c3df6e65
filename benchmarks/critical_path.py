"""The critical path of a rollout: the chain of events that caused each other, from the root's close back to its start.

Each step goes from an event to what caused it: a workflow task to the event that woke it, an activity's end to the
task that scheduled it, a child's or a Nexus operation's end to the close of the workflow it ran (in whichever
namespace), a workflow started by a Nexus operation to the caller's task that scheduled it, a signal to the task (or
the `signal_workflow` activity, for a signal across namespaces) that sent it. Only a cause from outside the
workflows (a client's start, an activity's signal-with-start) is found by time: the latest activity that had
started before it. Every workflow task on the path is one hop: one round trip between the server and a worker.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from histories import (
    ACTIVITY_ENDS,
    CHILD_ENDS,
    CLOSE_EVENTS,
    NEXUS_ENDS,
    WFT_ENDS,
    E,
    Key,
    Run,
    Tree,
    handler_of,
    signal_target,
    ts,
)
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

NOT_TRIGGERS = {E.EVENT_TYPE_ACTIVITY_TASK_STARTED, E.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, E.EVENT_TYPE_WORKFLOW_TASK_STARTED}
Step = tuple[Run, HistoryEvent]


@dataclass
class CriticalPath:
    """The chain of causes that ended the root workflow, walked back to its start, and where its time went."""

    workflow_tasks: int = 0  # completed workflow tasks on the path: one server round trip each
    timed_out_tasks: int = 0
    activities: int = 0
    nexus_starts: int = 0  # workflows started by a Nexus operation on the path (from the caller's schedule)
    nexus_ends: int = 0  # Nexus operations whose end is on the path (from the handler workflow's close)
    signal_activities: int = 0  # signals across namespaces on the path, matched to their `signal_workflow` activity
    crossings: Counter[str] = field(default_factory=Counter)  # what each crossing between namespaces cost in all
    by_type: Counter[str] = field(default_factory=Counter)  # activity types on the path
    activity_seconds: Counter[str] = field(default_factory=Counter)  # their run time (start to close), by type
    seconds: Counter[str] = field(default_factory=Counter)  # where the path's time went
    span: float = 0.0  # root start to root close, on the server's clock
    approximations: int = 0  # steps whose cause came from outside the workflows (a client or an activity), by time
    steps: list[tuple[float, str, int, str]] = field(default_factory=list)  # (time, workflow id, event id, type), last first


def critical_path(tree: Tree) -> CriticalPath:
    """Walk back from the root's close event through the events that caused each other (see module doc)."""
    return _Walk(tree).run()


def woken_by(run: Run, scheduled: HistoryEvent) -> HistoryEvent:
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


@dataclass
class _Sent:
    """A `signal_workflow` activity: the run that scheduled it, its scheduled and started events."""

    run: Run
    scheduled: HistoryEvent
    started: HistoryEvent | None


class _Walk:
    """One walk over `tree`, with the cross-workflow indexes it needs built once."""

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.out = CriticalPath()
        self.callers: dict[tuple[str, str, str], Step] = {}  # handler run -> (caller run, its NexusOperationScheduled)
        self.sent: dict[tuple[str, str, str], list[_Sent]] = {}  # (namespace, workflow id, signal) -> its activities
        for r in tree.all_runs():
            started = {e.activity_task_started_event_attributes.scheduled_event_id: e for e in r.events
                       if e.event_type == E.EVENT_TYPE_ACTIVITY_TASK_STARTED}
            for e in r.events:
                if e.event_type == E.EVENT_TYPE_NEXUS_OPERATION_STARTED and (handler := handler_of(e)):
                    self.callers[handler] = (r, r.event(e.nexus_operation_started_event_attributes.scheduled_event_id))
                elif e.event_type == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED and (target := signal_target(r.namespace, e)):
                    self.sent.setdefault(target, []).append(_Sent(r, e, started.get(e.event_id)))

    def run(self) -> CriticalPath:
        chain = self.tree.root_chain
        run, e = chain[-1], chain[-1].events[-1]
        self.out.span = ts(e) - ts(chain[0].started)
        for _ in range(100_000):
            self.out.steps.append((ts(e), run.workflow_id, e.event_id, EventType.Name(e.event_type).removeprefix("EVENT_TYPE_")))
            step = self.step(run, e)
            if step is None:
                return self.out
            run, e = step
        raise RuntimeError("critical path walk did not end")

    def step(self, run: Run, e: HistoryEvent) -> Step | None:
        """The event that caused `e`, or None at the start of the path."""
        t = e.event_type
        if t in CLOSE_EVENTS:
            wft = getattr(getattr(e, e.WhichOneof("attributes")), "workflow_task_completed_event_id", 0)
            return (run, run.event(wft)) if wft else None
        if t in WFT_ENDS:
            return self.workflow_task(run, e)
        if t in ACTIVITY_ENDS:
            attrs = getattr(e, e.WhichOneof("attributes"))
            started = run.event(attrs.started_event_id) if attrs.started_event_id else None
            return run, self.activity(run, run.event(attrs.scheduled_event_id), started, e)
        if t in CHILD_ENDS:
            child = self.tree.chain((run.namespace, getattr(e, e.WhichOneof("attributes")).workflow_execution.workflow_id))
            if not child:
                return None
            self.out.seconds["server: child closed to parent event"] += ts(e) - ts(child[-1].events[-1])
            return child[-1], child[-1].events[-1]
        if t in NEXUS_ENDS:
            return self.nexus_end(run, e)
        if t == E.EVENT_TYPE_NEXUS_OPERATION_STARTED:
            scheduled = run.event(e.nexus_operation_started_event_attributes.scheduled_event_id)
            self.out.seconds["server: nexus scheduled to operation started"] += ts(e) - ts(scheduled)
            return run, run.event(scheduled.nexus_operation_scheduled_event_attributes.workflow_task_completed_event_id)
        if t == E.EVENT_TYPE_TIMER_FIRED:
            started = run.event(e.timer_fired_event_attributes.started_event_id)
            self.out.seconds["timers"] += ts(e) - ts(started)
            return run, run.event(started.timer_started_event_attributes.workflow_task_completed_event_id)
        if t == E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            return self.workflow_started(run, e)
        if t == E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            return self.signaled(run, e)
        if t == E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED:
            initiated = run.event(e.child_workflow_execution_started_event_attributes.initiated_event_id)
            self.out.seconds["server: child initiated to child started"] += ts(e) - ts(initiated)
            return run, run.event(initiated.start_child_workflow_execution_initiated_event_attributes.workflow_task_completed_event_id)
        if t == E.EVENT_TYPE_EXTERNAL_WORKFLOW_EXECUTION_SIGNALED:
            initiated = run.event(e.external_workflow_execution_signaled_event_attributes.initiated_event_id)
            self.out.seconds["server: signal sent to signal received"] += ts(e) - ts(initiated)
            return run, run.event(initiated.signal_external_workflow_execution_initiated_event_attributes.workflow_task_completed_event_id)
        return self.external_cause(e)

    def workflow_task(self, run: Run, e: HistoryEvent) -> Step:
        t = e.event_type
        a = (e.workflow_task_completed_event_attributes if t == E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
             else e.workflow_task_timed_out_event_attributes if t == E.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
             else e.workflow_task_failed_event_attributes)
        scheduled = run.event(a.scheduled_event_id)
        if a.started_event_id:
            started = run.event(a.started_event_id)
            self.out.seconds["workflow task waits for a worker (schedule to start)"] += ts(started) - ts(scheduled)
            self.out.seconds["workflow task runs on the worker (start to complete)"] += ts(e) - ts(started)
        if t == E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            self.out.workflow_tasks += 1
        else:
            self.out.timed_out_tasks += 1
        cause = woken_by(run, scheduled)
        last_task = next((x for x in reversed(run.events[:scheduled.event_id - 1]) if x.event_type in WFT_ENDS), None)
        if last_task is not None and cause is not last_task and ts(last_task) > ts(cause):
            self.out.seconds["server: event held until the running workflow task ended"] += ts(last_task) - ts(cause)
            self.out.seconds["server: event to next task"] += ts(scheduled) - ts(last_task)
        else:
            self.out.seconds["server: event to next task"] += ts(scheduled) - ts(cause)
        return run, cause

    def activity(self, run: Run, scheduled: HistoryEvent, started: HistoryEvent | None, until: HistoryEvent,
                 ran: str = "activity runs (start to close)") -> HistoryEvent:
        """Count one activity on the path (from its schedule to `until`); return the task that scheduled it."""
        a = scheduled.activity_task_scheduled_event_attributes
        self.out.activities += 1
        self.out.by_type[a.activity_type.name] += 1
        if started is not None:
            self.out.seconds["activity waits for a worker (schedule to start)"] += ts(started) - ts(scheduled)
            self.out.seconds[ran] += ts(until) - ts(started)
            self.out.activity_seconds[a.activity_type.name] += ts(until) - ts(started)
        else:
            self.out.seconds["activity (no start recorded)"] += ts(until) - ts(scheduled)
        task = run.event(a.workflow_task_completed_event_id)
        self.out.seconds["server: task end to next command"] += ts(scheduled) - ts(task)
        return task

    def nexus_end(self, run: Run, e: HistoryEvent) -> Step | None:
        """A Nexus operation's end: back to the close of the workflow it ran (the last run of its chain)."""
        scheduled_id = getattr(e, e.WhichOneof("attributes")).scheduled_event_id
        started = next((x for x in run.events if x.event_type == E.EVENT_TYPE_NEXUS_OPERATION_STARTED
                        and x.nexus_operation_started_event_attributes.scheduled_event_id == scheduled_id), None)
        handler = handler_of(started) if started is not None else None
        chain = self.tree.chain(handler[:2]) if handler else []
        self.out.nexus_ends += 1
        if not chain:  # no workflow behind it (or not fetched): the operation as a whole
            scheduled = run.event(scheduled_id)
            self.out.seconds["nexus operation without a handler workflow"] += ts(e) - ts(scheduled)
            return run, run.event(scheduled.nexus_operation_scheduled_event_attributes.workflow_task_completed_event_id)
        closed = chain[-1].events[-1]
        self.out.seconds["server: handler closed to caller event"] += ts(e) - ts(closed)
        self.out.crossings["Nexus: handler closed to caller event"] += ts(e) - ts(closed)
        return chain[-1], closed

    def workflow_started(self, run: Run, e: HistoryEvent) -> Step | None:
        a = e.workflow_execution_started_event_attributes
        if a.continued_execution_run_id:
            chain = self.tree.chain(run.key)
            idx = next(i for i, r in enumerate(chain) if r.run_id == run.run_id)
            if idx == 0:  # the earlier run was not fetched
                return None
            prev = chain[idx - 1]
            return prev, prev.event(prev.events[-1].workflow_execution_continued_as_new_event_attributes.workflow_task_completed_event_id)
        parent: Key = (a.parent_workflow_namespace or run.namespace, a.parent_workflow_execution.workflow_id)
        if parent[1] and parent in self.tree.runs:
            caller = self.tree.run(parent, a.parent_workflow_execution.run_id)
            initiated = caller.event(a.parent_initiated_event_id)
            self.out.seconds["server: child initiated to child started"] += ts(e) - ts(initiated)
            return caller, caller.event(initiated.start_child_workflow_execution_initiated_event_attributes.workflow_task_completed_event_id)
        if (run.namespace, run.workflow_id, run.run_id) in self.callers:
            caller, scheduled = self.callers[(run.namespace, run.workflow_id, run.run_id)]
            self.out.seconds["server: nexus scheduled to handler started"] += ts(e) - ts(scheduled)
            self.out.crossings["Nexus: scheduled to handler started"] += ts(e) - ts(scheduled)
            self.out.nexus_starts += 1
            return caller, caller.event(scheduled.nexus_operation_scheduled_event_attributes.workflow_task_completed_event_id)
        if run.key == self.tree.root:
            return None
        return self.external_cause(e)

    def signaled(self, run: Run, e: HistoryEvent) -> Step | None:
        a = e.workflow_execution_signaled_event_attributes
        sender: Key = (run.namespace, a.external_workflow_execution.workflow_id)
        if sender[1]:
            sent = [(r, x) for r in self.tree.chain(sender) for x in r.events
                    if x.event_type == E.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED
                    and x.signal_external_workflow_execution_initiated_event_attributes.signal_name == a.signal_name
                    and x.signal_external_workflow_execution_initiated_event_attributes.workflow_execution.workflow_id == run.workflow_id
                    and ts(x) <= ts(e)]
            if sent:
                sender_run, initiated = max(sent, key=lambda p: ts(p[1]))
                self.out.seconds["server: signal sent to signal received"] += ts(e) - ts(initiated)
                return sender_run, sender_run.event(
                    initiated.signal_external_workflow_execution_initiated_event_attributes.workflow_task_completed_event_id)
            return self.external_cause(e)
        # no sender recorded: an activity's signal (across namespaces), matched to its `signal_workflow` activity
        candidates = [s for s in self.sent.get((run.namespace, run.workflow_id, a.signal_name), [])
                      if s.started is not None and ts(s.started) <= ts(e)]
        if not candidates:
            return self.external_cause(e)
        s = max(candidates, key=lambda c: ts(c.started))  # type: ignore[arg-type]
        self.out.signal_activities += 1
        self.out.crossings["signal by activity: scheduled to received"] += ts(e) - ts(s.scheduled)
        return s.run, self.activity(s.run, s.scheduled, s.started, e, ran="signal activity: start to signal received")

    def external_cause(self, e: HistoryEvent) -> Step | None:
        """An event a client or an activity caused (a signal-with-start from an activity, an update): continue from
        the latest activity that had started before it, in any of the tree's histories. None at the very start."""
        best: tuple[Run, HistoryEvent] | None = None
        for r in self.tree.all_runs():
            for x in r.events:
                if x.event_type == E.EVENT_TYPE_ACTIVITY_TASK_STARTED and ts(x) <= ts(e) and (best is None or ts(x) > ts(best[1])):
                    best = (r, x)
        if best is None:
            return None
        r, started = best
        self.out.approximations += 1
        return r, self.activity(r, r.event(started.activity_task_started_event_attributes.scheduled_event_id), started, e)
