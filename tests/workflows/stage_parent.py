"""A stand-in rollout for tests that run one stage on its own: a stage runs only when its rollout's own history
shows the Nexus operation that started it (workflows/stage/origin.py), so this stand-in starts it through Bifrost's
endpoint for the stage's task queue, under the id a rollout gives, answers its orders query with "keep" and
concludes it once it has succeeded. It runs on its own task queue (`<task queue>-parent`), so the Bifrost worker's
queue never sees it; the stage runs in the machinery namespace."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

from temporalio import workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import NexusOperationError
from temporalio.service import RPCError
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from activities.peers import PeerActivities, PeerSignal
    from common.namespaces import endpoint_name, machinery_namespace
    from common.types import stage_key
    from worker.endpoints import ensure_endpoint, machinery_client
    from workflows.stage.context import PROGRESS_SIGNAL
    from workflows.stage.models import StageConclusion, StageInput, StageOrders, StageState
    from workflows.stage.orders import STAGE_ORDERS_QUERY
    from workflows.stage.service import Machinery
    from workflows.stage.workflow import StageWorkflow


@workflow.defn(name="TestStageParent")
class StageParent:
    """Starts `inp`'s stage on `inp`'s rollout id's queue and keeps it when it succeeds."""

    def __init__(self) -> None:
        self.orders = StageOrders()
        self.key = ""

    @workflow.run
    async def run(self, inp: StageInput) -> None:
        self.key = stage_key(inp.region, inp.environment)
        self.orders.conclude[self.key] = StageConclusion(action="keep", reason="the test parent keeps it")
        queue = workflow.info().task_queue.removesuffix("-parent")
        client = workflow.create_nexus_client(service=Machinery, endpoint=endpoint_name(workflow.info().namespace, queue))
        try:
            await client.execute_operation(Machinery.run_stage, inp)
        except NexusOperationError:
            pass  # the test reads the stage's own result

    @workflow.signal(name=PROGRESS_SIGNAL)
    async def progress(self, state: StageState) -> None:
        if state.status == "succeeded":
            await workflow.execute_activity_method(
                PeerActivities.signal_workflow, PeerSignal(
                    workflow_id=f"{workflow.info().workflow_id}/{self.key}", signal="conclude",
                    arg=self.orders.conclude[self.key], namespace=machinery_namespace(workflow.info().namespace)),
                start_to_close_timeout=timedelta(seconds=20))

    @workflow.query(name=STAGE_ORDERS_QUERY)
    def stage_orders(self) -> StageOrders:
        return self.orders


@asynccontextmanager
async def stage_parent_worker(client: Client, task_queue: str) -> AsyncIterator[None]:
    """A worker for the stand-in rollouts of stages on `task_queue` (and the endpoint they start stages by)."""
    await ensure_endpoint(client, task_queue)
    peers = PeerActivities(client, machinery_client(client))
    async with Worker(client, task_queue=f"{task_queue}-parent", workflows=[StageParent],
                      activities=[peers.signal_workflow]):
        yield


async def start_stage(client: Client, inp: StageInput, task_queue: str) -> WorkflowHandle:
    """Start `inp`'s stage under a stand-in rollout (`inp.rollout_id`); the stage's own handle (machinery namespace)."""
    await client.start_workflow(StageParent.run, inp, id=inp.rollout_id, task_queue=f"{task_queue}-parent")
    stage = machinery_client(client).get_workflow_handle_for(
        StageWorkflow.run, f"{inp.rollout_id}/{stage_key(inp.region, inp.environment)}")
    async with asyncio.timeout(30):
        while True:
            try:
                await stage.describe()
                return stage
            except RPCError:
                await asyncio.sleep(0.1)  # the parent has not started it yet
