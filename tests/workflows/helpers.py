"""Request builders and worker helpers for workflow tests."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError

from activities.adapters.registry import AdapterRegistry
from activities.adapters.simulated import FleetScenario, SimulatedFleet
from activities.peers import PeerActivities, PeerAnswer, PeerQuery
from common.lock import LOCK_STATE_QUERY
from tests.conftest import shared_render_pool
from worker.build import build_worker
from workflows.request import RolloutRequest, parse_request
from workflows.rollout.workflow import RolloutWorkflow

METRICS = [
    {"name": "latency_p99", "kind": "latency", "direction": "increase", "allowed_increase": 1.2},
    {"name": "error_rate", "kind": "error_rate", "direction": "increase", "critical": True, "allowed_increase": 1.5},
]


def make_request(**overrides: Any) -> RolloutRequest:
    """A 3-region test+prod request with zero soak and instant analysis unless overridden."""
    data: dict[str, Any] = {
        "service": f"payments-{uuid.uuid4().hex[:8]}",
        "version": "2.0.0",
        "requested_by": "ci",
        "regions": [
            {"name": "us-east-1", "traffic_share": 0.5},
            {"name": "eu-west-1", "traffic_share": 0.3},
            {"name": "ap-south-1", "traffic_share": 0.2},
        ],
        "canary": {"metrics": METRICS, "analysis_minutes": 0, "judge": {"min_samples": 30}},
        "soak": {"test_hours": 0, "prod_hours": 0},
        "blast_radius": {"canary_region": "ap-south-1"},
        "rollback_scope": "all",
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return parse_request(data)


@contextmanager
def replaced_activity(cls: type, name: str, make: Callable[[Any], Any]) -> Iterator[None]:
    """Workers built inside run `make(original)` as the activity method `name` of `cls` (a test's fault or recorder);
    the original is put back on the way out. Leave the replacement's `self` unannotated: with it annotated the SDK
    no longer converts the input to its model, and the activity receives a dict."""
    original = getattr(cls, name)
    setattr(cls, name, activity.defn(name=name)(make(original)))
    try:
        yield
    finally:
        setattr(cls, name, original)


@contextmanager
def first_true_answer_unconfirmable(suffix: str = "") -> Iterator[list[str]]:
    """Workers started inside fail (non-retryably) the first look at a lock's state that answers the asking rollout
    (names it as holder, refused or superseded; only a rollout whose id ends with `suffix`), as a worker that did
    not answer would; yields the ids of the rollouts whose look failed."""
    failed: list[str] = []

    def make(original: Any) -> Any:
        async def flaky(self, q: PeerQuery) -> PeerAnswer:  # type: ignore[no-untyped-def]
            answer: PeerAnswer = await original(self, q)
            asker = activity.info().workflow_id
            state = answer.answer if q.query == LOCK_STATE_QUERY and isinstance(answer.answer, dict) else {}
            answers_asker = (state.get("holder") or {}).get("workflow_id") == asker \
                or asker in state.get("refused", {}) or asker in state.get("superseded", {})
            if not failed and answers_asker and asker.endswith(suffix):
                failed.append(asker)
                raise ApplicationError("the lock's worker did not answer (test)", non_retryable=True)
            return answer
        return flaky

    with replaced_activity(PeerActivities, "query_workflow", make):
        yield failed


def fleet(**scenario: Any) -> SimulatedFleet:
    scenario.setdefault("min_samples", 60)
    scenario.setdefault("fresh_draws", False)  # a test's health verdicts do not change with the hour it ran
    return SimulatedFleet(FleetScenario(**scenario))


@asynccontextmanager
async def running_worker(client: Client, f: SimulatedFleet, task_queue: str, tmp: Path | None = None, *,
                         promote_hold_floor_minutes: float | None = None, notifier: Any = None) -> AsyncIterator[None]:
    """A worker over the simulated fleet `f`; `promote_hold_floor_minutes`: its targets file's policy floor (default
    60 min); `notifier`: an object whose `send(n, namespace=, run_id=)` receives every notification."""
    reports = tmp or Path(".bifrost/test-reports")
    registry = AdapterRegistry.simulated(f)
    if promote_hold_floor_minutes is not None:
        registry.promote_hold_floor_minutes = promote_hold_floor_minutes
    registry.notifier = notifier
    async with build_worker(client, registry, task_queue=task_queue, reports_dir=reports,
                            render_pool=shared_render_pool()):
        yield


async def start(client: Client, req: RolloutRequest, task_queue: str) -> WorkflowHandle:
    return await client.start_workflow(
        RolloutWorkflow.run, req, id=f"{req.workflow_id}/{uuid.uuid4().hex[:6]}", task_queue=task_queue
    )


async def cancel_as_release_manager(client: Client, workflow_id: str) -> None:
    """Request the cancellation as the Web UI does for a signed-in user: with the identity rm@example.com."""
    rm = await Client.connect(client.service_client.config.target_host, namespace=client.namespace,
                              identity="rm@example.com")
    await rm.get_workflow_handle(workflow_id).cancel()


async def failed_at_once(handle: WorkflowHandle[Any, Any], failure_type: str, deadline: float = 20) -> ApplicationError:
    """The run failed within `deadline` seconds with a Bifrost failure of `failure_type` and no stack trace (one line
    for the UI); its cause, for the caller's own checks of the message."""
    async with asyncio.timeout(deadline):
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == failure_type, cause
    assert cause.failure is not None and cause.failure.stack_trace == ""
    return cause
