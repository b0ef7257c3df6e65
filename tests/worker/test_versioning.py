"""Worker Versioning on the dev server (docs/versioning.md): a rollout begun on build A finishes on A while build B,
made current, takes new rollouts; then A drains and its worker can stop without stranding anything."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TypeVar

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from activities.adapters.registry import AdapterRegistry
from bifrost_cli.ops import outcome, start_rollout
from tests.conftest import shared_render_pool
from tests.workflows.helpers import fleet, make_request
from worker.build import build_worker
from worker.endpoints import machinery_client
from worker.versioning import current_build, deployment_config, deployment_version, drainage, settle_current
from workflows.rollout.updates import Approve
from workflows.rollout.workflow import RolloutWorkflow

T = TypeVar("T")
ONE_REGION = {"regions": [{"name": "us-east-1", "traffic_share": 1.0}], "blast_radius": {"canary_region": None}}


async def eventually(probe: Callable[[], Awaitable[T]], ok: Callable[[T], bool], timeout: float = 90) -> T:
    """Poll `probe` until `ok` holds (a deadline, never a fixed sleep)."""
    async with asyncio.timeout(timeout):
        while not ok(value := await probe()):
            await asyncio.sleep(0.3)
    return value


async def builds_of(client: Client, workflow_id: str) -> set[str]:
    """The build ids that completed the workflow's tasks, from its own history (a rollout's in `client`'s namespace,
    its stages' and the lock's in the machinery namespace)."""
    seen = set()
    on = client if workflow_id.count("/") <= 3 and not workflow_id.startswith("service-lock/") else machinery_client(client)
    async for e in on.get_workflow_handle(workflow_id).fetch_history_events():
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            a = e.workflow_task_completed_event_attributes
            seen.add(a.deployment_version.build_id or a.worker_deployment_version or "unversioned")
    return seen


async def tree(client: Client, h: WorkflowHandle) -> list[str]:
    """The rollout and its stages (started through Nexus, in the machinery namespace)."""
    query = f"WorkflowId STARTS_WITH '{h.id}/' AND WorkflowType = 'StageWorkflow'"
    return [h.id, *[wf.id async for wf in machinery_client(client).list_workflows(query)]]


async def pinned_running(client: Client, version: str) -> list[str]:
    query = f"TemporalWorkerDeploymentVersion = '{version}' AND ExecutionStatus = 'Running'"
    return [wf.id for c in (client, machinery_client(client)) async for wf in c.list_workflows(query)]


async def test_a_rollout_soaks_on_build_a_while_build_b_takes_new_ones_and_a_drains(env, task_queue, tmp_path: Path):
    client = env.client
    name = f"bifrost-test-{uuid.uuid4().hex[:6]}"
    a, b = deployment_version(name, "A"), deployment_version(name, "B")
    registry = AdapterRegistry.simulated(fleet())
    async with AsyncExitStack() as stack:
        worker_a = await stack.enter_async_context(build_worker(
            client, registry, task_queue=task_queue, reports_dir=tmp_path, render_pool=shared_render_pool(),
            deployment=deployment_config(a)))
        said = await settle_current(client, a, set_current=False)  # a deployment without a current build gets A
        assert said.startswith(f"made build A the current version of deployment {name!r}"), said
        gated = make_request(approvals={"gates": [{"wave": 2}], "approvers": ["alice"]}, **ONE_REGION)
        first = await start_rollout(client, gated, task_queue)
        await eventually(lambda: first.query(RolloutWorkflow.status), lambda s: s.status == "awaiting_approval")

        async with build_worker(client, registry, task_queue=task_queue, reports_dir=tmp_path,
                                render_pool=shared_render_pool(), deployment=deployment_config(b)):
            # B polls, but is not current until someone says so: a new build takes no work by merely starting
            assert "routes new workflows to build A" in await settle_current(client, b, set_current=False)
            said = await settle_current(client, b, set_current=True)
            assert said == f"made build B the current version of deployment {name!r} (was A)", said
            assert await current_build(client, name) == "B"

            second = await start_rollout(client, make_request(**ONE_REGION), task_queue)
            assert (await asyncio.wait_for(outcome(second), 120)).status == "succeeded"
            for wid in await tree(client, second):
                assert await builds_of(client, wid) == {"B"}, wid

            # the first rollout, pinned, goes on and ends on A (its stages and lock too)
            await first.execute_update(RolloutWorkflow.approve, Approve(wave=2, approver="alice", comment="ok"))
            assert (await asyncio.wait_for(outcome(first), 120)).status == "succeeded"
            for wid in [*await tree(client, first), f"service-lock/{gated.service}"]:
                assert await builds_of(client, wid) == {"A"}, wid

            # A drains: the idle lock on A exits after its quiet period; meanwhile nothing else is pinned to it
            left = await pinned_running(client, a.to_canonical_string())
            assert set(left) <= {f"service-lock/{gated.service}"}, left
            await machinery_client(client).get_workflow_handle(f"service-lock/{gated.service}").terminate("test: the lock's idle period")
            await eventually(lambda: pinned_running(client, a.to_canonical_string()), lambda ids: not ids)
            status, _ = await drainage(client, a)
            assert status in ("DRAINING", "DRAINED"), status
            await worker_a.shutdown()  # A stops; B serves on
            third = await start_rollout(client, make_request(service=gated.service, version="2.1.0", **ONE_REGION),
                                        task_queue)
            assert (await asyncio.wait_for(outcome(third), 120)).status == "succeeded"
            assert await builds_of(client, third.id) == {"B"}
