"""Record histories of the shared controls' state shapes: `python -m tests.workflows.record_controls_histories`.

Writes tests/histories/controls-*.json, recorded with the phase + typed holds and the patch
`controls-upsert-on-change` (search attributes upserted only when they change): a gated rollout paused at the
gate, approved, held by the pause and resumed; and an evacuation that waits for approval, is paused and resumed.
The older groups stay as they were recorded (they replay the unpatched path). Re-record only on purpose.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from tests.workflows import evacuation_helpers as evac
from tests.workflows.helpers import fleet, make_request, running_worker
from tests.workflows.record_histories import _children, _save, paused_at_the_gate, start_recording
from workflows.evacuation import EvacuationWorkflow
from workflows.traffic_models import ApproveShift
from workflows.updates import Pause, Resume

OUT = Path(__file__).resolve().parent.parent / "histories"
GROUPS = ("controls-rollout", "controls-evacuation")


async def record() -> None:
    env = await start_recording(GROUPS)
    client = env.client
    try:
        async with running_worker(client, fleet(), "record"):
            gated = make_request(service="controls", approvals={"gates": [{"wave": 3}], "approvers": ["alice"]})
            h = await paused_at_the_gate(client, gated)
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
