"""The benchmarks reach a rollout's stages where they run, the machinery namespace: one helper gives both clients
(benchmarks/histories.py namespace_clients), scale.py counts the histories of both, failover.py finds the stage's
pending activity there and does not mistake a failing call for a stage not started yet."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest.mock import MagicMock

import pytest
from temporalio.api.enums.v1 import EventType, TimeoutType, WorkflowTaskFailedCause
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode, ServiceClient

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from failover import pending  # noqa: E402
from histories import namespace_clients, stage_client  # noqa: E402
from scale import _args, _history_stats, worker_command  # noqa: E402

E = EventType


def _client(namespace: str) -> Client:
    return Client(MagicMock(spec=ServiceClient), namespace=namespace)


def test_namespace_clients_gives_home_and_machinery_on_one_connection() -> None:
    home = _client("default")
    clients = namespace_clients(home)
    assert list(clients) == ["default", "default-machinery"]
    assert clients["default"] is home
    assert clients["default-machinery"].namespace == "default-machinery"
    assert clients["default-machinery"].service_client is home.service_client
    assert stage_client(home).namespace == "default-machinery"
    machinery = _client("team-machinery")  # a machinery client is its own machinery namespace: not counted twice
    assert list(namespace_clients(machinery)) == ["team-machinery"]


class _FakeNamespace:
    """Stands in for a client: lists its workflows and gives their histories."""

    def __init__(self, namespace: str, histories: dict[str, list[HistoryEvent]]) -> None:
        self.namespace = namespace
        self.histories = histories

    async def list_workflows(self, query: str | None = None) -> AsyncIterator[Any]:
        for wid in self.histories:
            yield SimpleNamespace(id=wid, run_id=f"run-{wid}")

    def get_workflow_handle(self, workflow_id: str, run_id: str | None = None) -> Any:
        events = self.histories[workflow_id]

        async def fetch_history_events() -> AsyncIterator[HistoryEvent]:
            for e in events:
                yield e
        return SimpleNamespace(fetch_history_events=fetch_history_events)


def _timed_out(event_id: int) -> HistoryEvent:
    e = HistoryEvent(event_id=event_id, event_type=E.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT)
    e.workflow_task_timed_out_event_attributes.timeout_type = TimeoutType.TIMEOUT_TYPE_START_TO_CLOSE
    return e


def _failed(event_id: int) -> HistoryEvent:
    e = HistoryEvent(event_id=event_id, event_type=E.EVENT_TYPE_WORKFLOW_TASK_FAILED)
    e.workflow_task_failed_event_attributes.cause = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND
    return e


def test_scale_counts_timeouts_in_the_stages_histories_too() -> None:
    home = _FakeNamespace("default", {"rollout/s/1": [HistoryEvent(event_id=1), _failed(2)]})
    machinery = _FakeNamespace("default-machinery", {"rollout/s/1/us-east-1/test": [HistoryEvent(event_id=1), _timed_out(2)]})
    stats = asyncio.run(_history_stats([home, machinery]))  # type: ignore[list-item]
    assert stats.histories == 2
    assert stats.by_namespace == {"default": 1, "default-machinery": 1}
    assert stats.timeouts == {"START_TO_CLOSE": 1}
    assert stats.failure_causes == {"UNHANDLED_COMMAND": 1} and stats.failures == 1  # why a task failed, not only how many


class _Describing:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def get_workflow_handle(self, workflow_id: str) -> Any:
        async def describe() -> Any:
            if isinstance(self.answer, Exception):
                raise self.answer
            return self.answer
        return SimpleNamespace(describe=describe)


def test_failover_pending_finds_the_activity_and_raises_on_a_real_error() -> None:
    activity = SimpleNamespace(activity_type=SimpleNamespace(name="deploy_canary"))
    found = _Describing(SimpleNamespace(raw_description=SimpleNamespace(pending_activities=[activity])))
    assert asyncio.run(pending(found, "s", "deploy_canary")) is activity  # type: ignore[arg-type]
    missing = _Describing(RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b""))
    assert asyncio.run(pending(missing, "s", "deploy_canary")) is None  # type: ignore[arg-type]
    denied = _Describing(RPCError("namespace default-machinery not found", RPCStatusCode.INVALID_ARGUMENT, b""))
    with pytest.raises(RPCError):
        asyncio.run(pending(denied, "s", "deploy_canary"))  # type: ignore[arg-type]


def test_scale_gives_each_count_a_fresh_simulated_fleet(tmp_path: Path) -> None:
    """The fleet keeps versions in a file: sharing it, a second count's `scale-<i>` would already run 2.0.0 and
    deploy and judge nothing (a run measured 43 s and no reports where a fresh fleet took 300 s and drew 800)."""
    args = _args(["--counts", "200,500"])
    first, second = (worker_command(args, tmp_path, n) for n in (200, 500))
    dbs = [cmd[cmd.index("--fleet-db") + 1] for cmd in (first, second)]
    assert dbs[0] != dbs[1] and all(Path(db).parent == tmp_path and not Path(db).exists() for db in dbs)
    assert worker_command(args, tmp_path, 200)[first.index("--fleet-db") + 1] != dbs[0]  # and a new one every run
