"""Record workflow histories for the replay test: `python -m tests.workflows.record_histories` (all groups).

Runs a few representative rollouts on a local dev server and writes every workflow's history
(rollout, stages, service lock) to tests/histories/. Re-record only on purpose: the replay test exists
to catch changes that would break rollouts already running in production.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from bifrost_cli.ops import outcome
from tests.workflows.helpers import fleet, make_request, running_worker, start
from tests.workflows.stage_parent import stage_parent_worker, start_stage
from worker.converter import DATA_CONVERTER
from worker.server import DEV_SERVER_FLAGS
from workflows import search
from workflows.models import StageInput
from workflows.request import RolloutRequest
from workflows.rollout import RolloutWorkflow
from workflows.updates import Abort, Approve, Pause, Resume

OUT = Path(__file__).resolve().parent.parent / "histories"


async def _save(client: Client, name: str, workflow_ids: list[str]) -> None:
    for i, wid in enumerate(workflow_ids):
        history = await client.get_workflow_handle(wid).fetch_history()
        path = OUT / f"{name}-{i:02d}.json"
        path.write_text(json.dumps({"workflow_id": wid, "history": json.loads(history.to_json())}, indent=1))
        print(f"wrote {path.relative_to(OUT.parent.parent)}")


async def _children(client: Client, rollout_id: str) -> list[str]:
    ids = []
    async for wf in client.list_workflows(f"ParentWorkflowId = '{rollout_id}'"):
        ids.append(wf.id)
    return sorted(ids)


async def _wait(handle, pred) -> None:
    async with asyncio.timeout(60):
        while not pred(await handle.query(RolloutWorkflow.status)):
            await asyncio.sleep(0.1)


async def paused_at_the_gate(client: Client, gated: RolloutRequest) -> WorkflowHandle:
    """Start a rollout gated at wave 3; pause it at the gate, approve, let the pause hold, resume; let it end."""
    h = await start(client, gated, "record")
    await _wait(h, lambda s: s.status == "awaiting_approval")
    await h.execute_update(RolloutWorkflow.pause, Pause(by="carol", reason="recording"))
    await h.execute_update(RolloutWorkflow.approve, Approve(wave=3, approver="alice", comment="ok"))
    await _wait(h, lambda s: s.status == "paused")
    await h.execute_update(RolloutWorkflow.resume, Resume(by="carol"))
    await outcome(h)
    return h


GROUPS = ("good", "regression", "report", "approval-pause", "abort", "soak-continued")


async def _runs(client: Client, workflow_id: str) -> list[str]:
    """Run ids of a workflow id, oldest first (a continue-as-new chain)."""
    runs = [(wf.start_time, wf.run_id) async for wf in client.list_workflows(f"WorkflowId = '{workflow_id}'")]
    return [run for _, run in sorted(runs)]


async def _save_runs(client: Client, name: str, workflow_id: str) -> None:
    for i, run in enumerate(await _runs(client, workflow_id)):
        history = await client.get_workflow_handle(workflow_id, run_id=run).fetch_history()
        path = OUT / f"{name}-{i:02d}.json"
        path.write_text(json.dumps({"workflow_id": workflow_id, "history": json.loads(history.to_json())}, indent=1))
        print(f"wrote {path.relative_to(OUT.parent.parent)}")


async def start_recording(groups: tuple[str, ...]) -> WorkflowEnvironment:
    """Remove the old recordings of `groups` and start a local dev server to record them again."""
    OUT.mkdir(exist_ok=True)
    for group in groups:
        for old in OUT.glob(f"{group}-*.json"):
            old.unlink()
    temporal = str(Path(sys.executable).parent / "temporal")
    return await WorkflowEnvironment.start_local(dev_server_existing_path=temporal, search_attributes=search.ALL,
                                                 data_converter=DATA_CONVERTER, dev_server_extra_args=DEV_SERVER_FLAGS)


async def record() -> None:
    env = await start_recording(GROUPS)
    client = env.client
    try:
        # 1. a good rollout, and 2. a regression in the second production region (scope all)
        good = make_request()
        bad = make_request(version="2.0.1")
        f = fleet(effects=[{"version": "2.0.1", "regions": ["us-east-1"], "environments": ["prod"], "latency_factor": 1.6}])
        async with running_worker(client, f, "record"):
            for name, req in (("good", good), ("regression", bad)):
                h = await start(client, req, "record")
                await outcome(h)
                await _save(client, name, [h.id, *await _children(client, h.id)])
            # the ReportWorkflow that drew the failing canary's page (the stage did not wait for it)
            drawing = await _children(client, f"{h.id}/us-east-1/prod")
            await client.get_workflow_handle(drawing[0]).result()
            await _save(client, "report", drawing)
            # 3. approval gate with pause and resume, then 4. abort during a wave
            gated = make_request(approvals={"gates": [{"wave": 3}], "approvers": ["alice"]})
            h = await paused_at_the_gate(client, gated)
            await _save(client, "approval-pause", [h.id, *await _children(client, h.id)])
            slow = make_request(canary={"analysis_minutes": 5})
            h = await start(client, slow, "record")
            await _wait(h, lambda s: s.stage("ap-south-1/test").status == "analyzing")
            await h.execute_update(RolloutWorkflow.abort, Abort(by="erin", reason="recording"))
            await outcome(h)
            await _save(client, "abort", [h.id, *await _children(client, h.id), f"service-lock/{slow.service}"])
            # 5. a stage whose soak continues as new twice: every run of the chain
            await _soak_continued(client)
    finally:
        await env.shutdown()


async def _soak_continued(client: Client) -> None:
    """A stage whose soak continues as new twice, run as the child of a stand-in rollout (a stage runs only as its
    rollout's child): every run of its chain."""
    soaking = make_request(canary={"soak_check_minutes": 1 / 60})
    inp = StageInput(rollout_id=f"{soaking.workflow_id}/soak", service=soaking.service, version=soaking.version,
                     image=soaking.image, region="us-east-1", environment="prod", canary=soaking.canary,
                     soak_hours=9 / 3600, history_budget=60)
    async with stage_parent_worker(client, "record"):
        stage = await start_stage(client, inp, "record")
        await stage.result()
    await _save_runs(client, "soak-continued", stage.id)


async def record_soak_continued() -> None:
    """Only the soak-continued group: `python -m tests.workflows.record_histories soak-continued`."""
    env = await start_recording(("soak-continued",))
    try:
        async with running_worker(env.client, fleet(), "record"):
            await _soak_continued(env.client)
    finally:
        await env.shutdown()


async def record_all() -> None:
    """Every group: the rollouts above, then the evacuations."""
    from tests.workflows import record_evacuation_histories

    await record()
    await record_evacuation_histories.record()


if __name__ == "__main__":
    asyncio.run(record_soak_continued() if sys.argv[1:] == ["soak-continued"] else record_all())
