"""A stage runs in the machinery namespace, started by its rollout through Nexus: it has no parent, and the links and
completion callback on its start can be forged by hand. It must prove, from its rollout's own history, that the
rollout started this very run before it deploys anything (workflows/stage/origin.py); and it must not outlive a
rollout run terminated by hand while holding its canary (the reaper)."""

from __future__ import annotations

import asyncio
import uuid

from temporalio.api.common.v1 import Link, WorkflowType
from temporalio.api.common.v1.message_pb2 import Callback
from temporalio.api.enums.v1 import EventType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import StartWorkflowExecutionRequest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from tests.hostile.test_provenance_lock import ONE_REGION, refused_at_once
from tests.ui.test_console import wait_for_status
from tests.workflows.helpers import fleet, make_request, running_worker, start
from worker.endpoints import machinery_client
from workflows.rollout.workflow import RolloutWorkflow
from workflows.stage.models import StageConclusion, StageDetail, StageInput
from workflows.stage.workflow import StageWorkflow

GATE = {"approvers": ["alice"], "gates": [{"wave": 2}], "timeout_hours": 1}
TWO_WAVES = {"regions": [{"name": "us-east-1", "traffic_share": 0.5}, {"name": "eu-west-1", "traffic_share": 0.5}],
             "blast_radius": {"canary_region": "us-east-1"}, "soak": {"test_hours": 0, "prod_hours": 0}}


def stage_input(req, region: str, environment: str = "prod", rollout_id: str | None = None) -> StageInput:
    return StageInput(rollout_id=rollout_id or req.workflow_id, service=req.service, version=req.version, image=req.image,
                      region=region, environment=environment, canary=req.canary, soak_hours=0)


async def forged_start(client: Client, inp: StageInput, task_queue: str, rollout_run: str) -> WorkflowHandle:
    """A hand StartWorkflowExecution in the machinery namespace carrying what a Nexus start carries: a link to the
    rollout's NexusOperationScheduled event and a `temporal://system` completion callback (the server accepts both)."""
    wid = f"{inp.rollout_id}/{inp.region}/{inp.environment}"
    link = Link(workflow_event=Link.WorkflowEvent(
        namespace=client.namespace.removesuffix("-machinery"), workflow_id=inp.rollout_id, run_id=rollout_run,
        event_ref=Link.WorkflowEvent.EventReference(event_id=5, event_type=EventType.EVENT_TYPE_NEXUS_OPERATION_SCHEDULED)))
    req = StartWorkflowExecutionRequest(
        namespace=client.namespace, workflow_id=wid, workflow_type=WorkflowType(name="StageWorkflow"),
        task_queue=TaskQueue(name=task_queue), input={"payloads": await client.data_converter.encode([inp])},
        identity="mallory", request_id=str(uuid.uuid4()), links=[link],
        completion_callbacks=[Callback(nexus=Callback.Nexus(url="temporal://system", header={}))])
    started = await client.workflow_service.start_workflow_execution(req)
    return client.get_workflow_handle(wid, run_id=started.run_id)


async def test_a_stage_started_by_hand_in_the_machinery_namespace_deploys_nothing(env, task_queue, tmp_path):
    req = make_request(**ONE_REGION)
    f = fleet()
    async with running_worker(env.client, f, task_queue, tmp_path):
        h = await machinery_client(env.client).start_workflow(
            "StageWorkflow", stage_input(req, "us-east-1"), id=f"{req.workflow_id}/us-east-1/prod", task_queue=task_queue)
        message = await refused_at_once(h, "rollout_id")
    assert "no rollout" in message, message
    assert not [c for c in f.calls if c[0] != "current_version"], f.calls  # before: no parent, refused; now: no history


async def test_a_forged_stage_beside_its_running_rollout_refuses_and_ignores_its_signals(env, task_queue, tmp_path):
    req = make_request(approvals=GATE, **TWO_WAVES)
    f = fleet()
    async with running_worker(env.client, f, task_queue, tmp_path):
        rollout = await start(env.client, req, task_queue)
        await wait_for_status(env.client, rollout.id, "awaiting_approval", 60)  # wave 2 (eu-west-1) not started
        run = (await rollout.describe()).run_id
        forged = await forged_start(machinery_client(env.client), stage_input(req, "eu-west-1", rollout_id=rollout.id),
                                    task_queue, run)
        for signal, arg in ((StageWorkflow.conclude, StageConclusion(action="keep")), (StageWorkflow.skip_soak, "x"),
                            (StageWorkflow.set_hold, False)):
            try:
                await forged.signal(signal, arg)
            except Exception:  # noqa: BLE001 - it may have failed already: fine, it deployed nothing either way
                pass
        message = await refused_at_once(forged, "rollout_id")
        assert "started no run" in message, message
        await rollout.terminate("test over")
    assert not [c for c in f.calls if c[1].startswith("eu-west-1") and c[0] != "current_version"], f.calls


async def test_a_stage_whose_rollout_was_terminated_waiting_for_its_verdict_ends_keeping_it(ts_env, task_queue, tmp_path):
    req = make_request(approvals=GATE, **TWO_WAVES)
    f = fleet()
    machinery = machinery_client(ts_env.client)
    async with running_worker(ts_env.client, f, task_queue, tmp_path):
        rollout = await start(ts_env.client, req, task_queue)
        await wait_for_status(ts_env.client, rollout.id, "awaiting_approval", 60)  # wave 1 awaits its verdict
        waiting = [st.key for st in (await rollout.query(RolloutWorkflow.status)).stages if st.awaiting_verdict]
        assert waiting, "no stage waits for its verdict"
        await rollout.terminate("by hand")  # no cancellation reaches a stage started through Nexus
        stage = machinery.get_workflow_handle_for(StageWorkflow.run, f"{rollout.id}/{waiting[0]}")
        async with asyncio.timeout(60):  # before: the stage waited for a verdict for ever
            state = await stage.result()
        detail: StageDetail = await stage.query(StageWorkflow.progress)
    assert state.status == "succeeded" and "ended without a verdict" in state.reason, state
    assert any(a.action == "rollout-gone" for a in detail.audit), detail.audit
    assert (await stage.describe()).status == WorkflowExecutionStatus.COMPLETED


async def test_a_working_stage_whose_rollout_was_terminated_rolls_back(ts_env, task_queue, tmp_path):
    req = make_request(soak={"test_hours": 0, "prod_hours": 12}, canary={"soak_check_minutes": 60}, **ONE_REGION)
    f = fleet()
    machinery = machinery_client(ts_env.client)
    async with running_worker(ts_env.client, f, task_queue, tmp_path):
        rollout = await start(ts_env.client, req, task_queue)
        stage = machinery.get_workflow_handle(f"{rollout.id}/us-east-1/prod")
        async with asyncio.timeout(60):
            while True:
                try:
                    detail: StageDetail = await stage.query(StageWorkflow.progress)
                    if detail.state.status == "soaking":
                        break
                except Exception:  # noqa: BLE001 - not started yet
                    pass
                await asyncio.sleep(0.05)
        await rollout.terminate("by hand")
        async with asyncio.timeout(60):  # before: the stage soaked on for 12 h, then waited for a verdict for ever
            try:
                await stage.result()
            except Exception:  # noqa: BLE001 - a stopped stage may end red or rolled back: its state says
                pass
        detail = await stage.query(StageWorkflow.progress)
    assert detail.state.status == "rolled_back", detail.state
    assert any(a.action == "rollout-gone" for a in detail.audit), detail.audit
    assert f.snapshot()[f"{req.service}/us-east-1/prod"]["primary"] == "1.0.0"
    assert f.snapshot()[f"{req.service}/us-east-1/prod"]["canary"] is None
