"""The benchmarks' history reading across the two namespaces: Nexus links, signals sent by an activity, the critical
path from a rollout into its stage in the machinery namespace and back (benchmarks/histories.py, critical_path.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.api.common.v1 import Link, Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from critical_path import critical_path  # noqa: E402
from histories import Run, Tree, handler_of, referenced, signal_target  # noqa: E402

E = EventType
HOME, MACHINERY = "default", "default-machinery"
STAGE = "rollout/svc/1.0.0/us-east-1/test"


def _event(event_id: int, kind: EventType.ValueType, at: float, attrs: str = "", **fields: Any) -> HistoryEvent:
    e = HistoryEvent(event_id=event_id, event_type=kind, event_time=Timestamp(seconds=1_000, nanos=int(at * 1e9)))
    target = getattr(e, attrs) if attrs else None
    for name, value in fields.items():
        if name == "links":
            e.links.extend(value)
        elif name == "activity":
            target.activity_type.name = value  # type: ignore[union-attr]
        elif name == "input":
            target.input.payloads.append(Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(value).encode()))  # type: ignore[union-attr]
        elif name == "signal_name":
            target.signal_name = value  # type: ignore[union-attr]
        else:
            setattr(target, name, value)
    if attrs and not fields:
        target.SetInParent()  # type: ignore[union-attr]
    return e


def _task(first: int, at: float) -> list[HistoryEvent]:
    """A workflow task: scheduled, started, completed (events first .. first + 2)."""
    return [_event(first, E.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, at, "workflow_task_scheduled_event_attributes"),
            _event(first + 1, E.EVENT_TYPE_WORKFLOW_TASK_STARTED, at + 0.001, "workflow_task_started_event_attributes",
                   scheduled_event_id=first),
            _event(first + 2, E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, at + 0.002, "workflow_task_completed_event_attributes",
                   scheduled_event_id=first, started_event_id=first + 1)]


def _started(at: float) -> HistoryEvent:
    return _event(1, E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, at, "workflow_execution_started_event_attributes")


def _closed(event_id: int, at: float, task: int) -> HistoryEvent:
    return _event(event_id, E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, at, "workflow_execution_completed_event_attributes",
                  workflow_task_completed_event_id=task)


def _link(namespace: str, workflow_id: str, run_id: str) -> Link:
    return Link(workflow_event=Link.WorkflowEvent(namespace=namespace, workflow_id=workflow_id, run_id=run_id))


def _signal_activity(event_id: int, at: float, task: int, body: Any, name: str = "signal_workflow") -> HistoryEvent:
    return _event(event_id, E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, at, "activity_task_scheduled_event_attributes",
                  activity=name, input=body, workflow_task_completed_event_id=task)


def _tree(ends_on_stage: bool) -> Tree:
    """A rollout (home) that starts one stage (machinery) by Nexus; the stage signals it by an activity, then ends.
    The rollout ends on the operation's completion (`ends_on_stage`) or on the signal."""
    rollout = [_started(0.0), *_task(2, 0.0),
               _event(5, E.EVENT_TYPE_NEXUS_OPERATION_SCHEDULED, 0.002, "nexus_operation_scheduled_event_attributes",
                      workflow_task_completed_event_id=4),
               _event(6, E.EVENT_TYPE_NEXUS_OPERATION_STARTED, 0.010, "nexus_operation_started_event_attributes",
                      scheduled_event_id=5, links=[_link(MACHINERY, STAGE, "stage-run")]),
               *_task(7, 0.010),
               _event(10, E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED, 0.030, "workflow_execution_signaled_event_attributes",
                      signal_name="stage_progress"),
               *_task(11, 0.030)]
    if ends_on_stage:
        rollout += [_event(14, E.EVENT_TYPE_NEXUS_OPERATION_COMPLETED, 0.050, "nexus_operation_completed_event_attributes",
                           scheduled_event_id=5), *_task(15, 0.050), _closed(18, 0.052, 17)]
    else:
        rollout += [_closed(14, 0.032, 13)]
    stage = [_started(0.008), *_task(2, 0.008),
             _signal_activity(5, 0.010, 4, {"workflow_id": "rollout/svc/1.0.0", "signal": "stage_progress", "namespace": HOME}),
             _event(6, E.EVENT_TYPE_ACTIVITY_TASK_STARTED, 0.011, "activity_task_started_event_attributes", scheduled_event_id=5),
             _event(7, E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, 0.031, "activity_task_completed_event_attributes",
                    scheduled_event_id=5, started_event_id=6),
             *_task(8, 0.031), _closed(11, 0.045, 10)]
    tree = Tree(root=(HOME, "rollout/svc/1.0.0"))
    tree.runs[tree.root] = [Run(HOME, "rollout/svc/1.0.0", "rollout-run", rollout, 0)]
    tree.runs[(MACHINERY, STAGE)] = [Run(MACHINERY, STAGE, "stage-run", stage, 0)]
    return tree


def test_a_nexus_operation_names_the_workflow_it_started_by_its_link() -> None:
    started = _tree(True).runs[(HOME, "rollout/svc/1.0.0")][0].event(6)
    assert handler_of(started) == (MACHINERY, STAGE, "stage-run")
    assert handler_of(_event(6, E.EVENT_TYPE_NEXUS_OPERATION_STARTED, 0.0, "nexus_operation_started_event_attributes")) is None


def test_a_signal_activity_names_its_target_and_one_without_a_namespace_goes_home() -> None:
    body = {"workflow_id": "rollout/x", "signal": "stage_progress", "arg": None, "namespace": None}
    assert signal_target(MACHINERY, _signal_activity(5, 0.0, 4, body)) == (HOME, "rollout/x", "stage_progress")
    assert signal_target(HOME, _signal_activity(5, 0.0, 4, {**body, "namespace": MACHINERY})) == (MACHINERY, "rollout/x",
                                                                                                   "stage_progress")
    assert signal_target(HOME, _signal_activity(5, 0.0, 4, body, name="notify")) is None
    assert signal_target(HOME, _signal_activity(5, 0.0, 4, ["not", "a", "signal"])) is None


def test_a_run_references_workflows_by_namespace_and_id() -> None:
    tree = _tree(True)
    assert referenced(tree.runs[tree.root][0]) == {(MACHINERY, STAGE)}
    assert referenced(tree.runs[(MACHINERY, STAGE)][0]) == {(HOME, "rollout/svc/1.0.0")}


def test_the_critical_path_goes_through_the_stage_a_nexus_operation_ran() -> None:
    path = critical_path(_tree(ends_on_stage=True))
    visited = [(wid, event_id) for _, wid, event_id, _ in reversed(path.steps)]
    assert visited == [("rollout/svc/1.0.0", 1), ("rollout/svc/1.0.0", 4), (STAGE, 1), (STAGE, 4), (STAGE, 7),
                       (STAGE, 10), (STAGE, 11), ("rollout/svc/1.0.0", 14), ("rollout/svc/1.0.0", 17),
                       ("rollout/svc/1.0.0", 18)]
    assert (path.workflow_tasks, path.nexus_starts, path.nexus_ends, path.approximations) == (4, 1, 1, 0)
    assert round(path.seconds["server: nexus scheduled to handler started"], 4) == 0.006
    assert round(path.seconds["server: handler closed to caller event"], 4) == 0.005


def test_a_signal_sent_by_an_activity_continues_from_that_activity() -> None:
    path = critical_path(_tree(ends_on_stage=False))
    visited = [(wid, event_id) for _, wid, event_id, _ in reversed(path.steps)]
    assert visited == [("rollout/svc/1.0.0", 1), ("rollout/svc/1.0.0", 4), (STAGE, 1), (STAGE, 4),
                       ("rollout/svc/1.0.0", 10), ("rollout/svc/1.0.0", 13), ("rollout/svc/1.0.0", 14)]
    assert (path.workflow_tasks, path.nexus_starts, path.signal_activities, path.approximations) == (3, 1, 1, 0)
    assert path.by_type["signal_workflow"] == 1
    assert round(path.seconds["signal activity: start to signal received"], 4) == 0.019
    assert round(path.crossings["signal by activity: scheduled to received"], 4) == 0.020
