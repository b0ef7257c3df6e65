"""Builders for evacuation tests: a simulated record set over three regions, a worker, and status polling."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle

from activities.adapters.registry import AdapterRegistry, registry_from_targets
from activities.adapters.simulated import FleetScenario, SimulatedFleet
from activities.adapters.targets import parse_targets
from tests.conftest import shared_render_pool
from worker.build import build_worker
from workflows.evacuation.models import EvacuationState
from workflows.evacuation.settings import EvacuationInput
from workflows.evacuation.workflow import EvacuationWorkflow

REGIONS = ("us-east-1", "eu-west-1", "ap-south-1")


def service() -> str:
    return f"pay-{uuid.uuid4().hex[:8]}"


def simulated_targets(*, ttl: int = 1, max_replicas: int | None = None, regions: tuple[str, ...] = REGIONS,
                      weights: dict[str, int] | None = None, replicas: int | None = None) -> dict[str, Any]:
    """A targets file: simulated deployer and metrics, one simulated weighted record per prod region."""
    targets = []
    for r in regions:
        traffic: dict[str, Any] = {"simulated": {"weight": (weights or {}).get(r, 100), "ttl_seconds": ttl}}
        if max_replicas is not None:
            traffic["max_replicas"] = max_replicas
        targets.append({"region": r, "environment": "prod", "traffic": traffic})
    deployer: dict[str, Any] = {"kind": "simulated"}
    if replicas is not None:
        deployer["replicas"] = replicas
    return {"defaults": {"deployer": deployer, "metrics": {"kind": "simulated"}}, "targets": targets}


def simulated_registry(**kwargs: Any) -> tuple[AdapterRegistry, SimulatedFleet]:
    fleet = SimulatedFleet(FleetScenario(fresh_draws=False, min_samples=60))
    return registry_from_targets(parse_targets(simulated_targets(**kwargs)), fleet), fleet


def evacuation(svc: str, region: str = "eu-west-1", **overrides: Any) -> EvacuationInput:
    # The simulated fleet gives 60 samples per window whatever its length, so the judge needs no minimum wait here.
    data: dict[str, Any] = {"service": svc, "region": region, "requested_by": "alice", "reason": "INC-42 latency in eu-west-1",
                            "health_baseline_minutes": 1, "health_interval_seconds": 1, "judge": {"min_samples": 1}}
    data.update(overrides)
    return EvacuationInput.model_validate(data)


@asynccontextmanager
async def running_worker(client: Client, registry: AdapterRegistry, task_queue: str, tmp: Path) -> AsyncIterator[None]:
    async with build_worker(client, registry, task_queue=task_queue, reports_dir=tmp, graceful_shutdown=timedelta(seconds=1),
                            render_pool=shared_render_pool()):
        yield


async def start(client: Client, inp: EvacuationInput, task_queue: str) -> WorkflowHandle:
    """Start under the production id, traffic/<service> (the only one an evacuation runs under); each test has its
    own service (`service()`), so tests sharing one server do not meet."""
    return await client.start_workflow(EvacuationWorkflow.run, inp, id=inp.workflow_id, task_queue=task_queue)


async def wait_for(handle: WorkflowHandle, pred: Callable[[EvacuationState], bool], timeout: float = 60.0) -> EvacuationState:
    """Poll the status query until `pred(state)` holds; fail after `timeout` seconds."""
    async with asyncio.timeout(timeout):
        while True:
            state = await handle.query(EvacuationWorkflow.status)
            if pred(state):
                return state
            await asyncio.sleep(0.1)
