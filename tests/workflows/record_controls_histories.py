"""Record histories of the shared controls' state shapes: `python -m tests.workflows.record_controls_histories`.

Writes tests/histories/controls-*.json, recorded with the phase + typed holds and the patch
`controls-upsert-on-change` (search attributes upserted only when they change): a gated rollout paused at the
gate, approved, held by the pause and resumed; and an evacuation that waits for approval, is paused and resumed.
The older groups stay as they were recorded (they replay the unpatched path). Re-record only on purpose.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from temporalio.client import Client

from bifrost_cli.ops import outcome
from tests.workflows import evacuation_helpers as evac
from tests.workflows.helpers import fleet, make_request, running_worker, start
from tests.workflows.record_histories import _children, _wait, start_recording
from workflows.evacuation import EvacuationWorkflow
from workflows.rollout import RolloutWorkflow
from workflows.traffic_models import ApproveShift
from workflows.updates import Approve, Pause, Resume

OUT = Path(__file__).resolve().parent.parent / "histories"
GROUPS = ("controls-rollout", "controls-evacuation")


async def _save(client: Client, name: str, workflow_ids: list[str]) -> None:
    for i, wid in enumerate(workflow_ids):
        history = await client.get_workflow_handle(wid).fetch_history()
        path = OUT / f"{name}-{i:02d}.json"
        path.write_text(json.dumps({"workflow_id": wid, "history": json.loads(history.to_json())}, indent=1))
        print(f"wrote {path.relative_to(OUT.parent.parent)}")


async def record() -> None:
    env = await start_recording(GROUPS)
    client = env.client
    try:
        async with running_worker(client, fleet(), "record"):
            gated = make_request(service="controls", approvals={"gates": [{"wave": 3}], "approvers": ["alice"]})
            h = await start(client, gated, "record")
            await _wait(h, lambda s: s.status == "awaiting_approval")
            await h.execute_update(RolloutWorkflow.pause, Pause(by="carol", reason="recording"))
            await h.execute_update(RolloutWorkflow.approve, Approve(wave=3, approver="alice", comment="ok"))
            await _wait(h, lambda s: s.status == "paused")
            await h.execute_update(RolloutWorkflow.resume, Resume(by="carol"))
            await outcome(h)
            await _save(client, "controls-rollout", [h.id, *await _children(client, h.id)])
        registry, _ = evac.simulated_registry(ttl=1)
        with tempfile.TemporaryDirectory() as tmp:
            async with evac.running_worker(client, registry, "record", Path(tmp)):
                e = await evac.start(client, evac.evacuation("controls", require_approval=True), "record")
                await evac.wait_for(e, lambda s: s.status == "awaiting_approval")
                await e.execute_update(EvacuationWorkflow.pause, Pause(by="carol", reason="recording"))
                await e.execute_update(EvacuationWorkflow.approve, ApproveShift(approver="alice", comment="ok"))
                await evac.wait_for(e, lambda s: s.status == "paused")
                await e.execute_update(EvacuationWorkflow.resume, Resume(by="carol"))
                await e.result()
                await _save(client, "controls-evacuation", [e.id])
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(record())
