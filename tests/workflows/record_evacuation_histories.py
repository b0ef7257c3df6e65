"""Record evacuation histories for the replay test: `python -m tests.workflows.record_evacuation_histories`.

Writes tests/histories/evacuation-*.json: an approved, paused and resumed evacuation followed by its
restore, and an evacuation without pre-warm whose alarm reverts it; `... nested` records only
evacuation-nested-*.json: two regions evacuated, then one restored while the other stays evacuated.
Re-record only on purpose (the replay test exists to catch changes that would break evacuations already running). `record_histories` runs it too.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

from temporalio.client import Client

from tests.workflows.evacuation_helpers import evacuation, running_worker, simulated_registry, start, wait_for
from tests.workflows.record_histories import start_recording
from workflows.evacuation import EvacuationWorkflow
from workflows.traffic_models import ApproveShift
from workflows.updates import Pause, Resume

OUT = Path(__file__).resolve().parent.parent / "histories"


async def _save(client: Client, name: str, workflow_id: str) -> None:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    path = OUT / f"{name}.json"
    path.write_text(json.dumps({"workflow_id": workflow_id, "history": json.loads(history.to_json())}, indent=1))
    print(f"wrote {path.relative_to(OUT.parent.parent)}")


async def record() -> None:
    env = await start_recording(("evacuation-approved", "evacuation-restore", "evacuation-alarm"))
    try:
        registry, _ = simulated_registry(ttl=1)
        with tempfile.TemporaryDirectory() as tmp:
            async with running_worker(env.client, registry, "record", Path(tmp)):
                h = await start(env.client, evacuation("recorded", require_approval=True), "record")
                await wait_for(h, lambda s: s.status == "awaiting_approval")
                await h.execute_update(EvacuationWorkflow.pause, Pause(by="carol", reason="recording"))
                await h.execute_update(EvacuationWorkflow.approve, ApproveShift(approver="alice", comment="ok"))
                await wait_for(h, lambda s: s.status == "paused")
                await h.execute_update(EvacuationWorkflow.resume, Resume(by="carol"))
                evacuated = await h.result()
                await _save(env.client, "evacuation-approved-00", h.id)
                h = await start(env.client, evacuated.restore_input(requested_by="bob"), "record")
                await h.result()
                await _save(env.client, "evacuation-restore-00", h.id)
                h = await start(env.client, evacuation("recorded-alarm", prewarm=False), "record")
                await h.result()
                await _save(env.client, "evacuation-alarm-00", h.id)
    finally:
        await env.shutdown()


async def record_nested() -> None:
    """A restore planned from the weights now, leaving another evacuated region alone (issue #17 item 3)."""
    env = await start_recording(("evacuation-nested",))
    try:
        registry, _ = simulated_registry(ttl=1)
        with tempfile.TemporaryDirectory() as tmp:
            async with running_worker(env.client, registry, "record", Path(tmp)):
                eu = await (await start(env.client, evacuation("nested"), "record")).result()
                ap = await (await start(env.client, evacuation("nested", region="ap-south-1",
                                                               home_weights=eu.home_weights), "record")).result()
                await _save(env.client, "evacuation-nested-evacuate-01", f"{ap.workflow_id}")
                h = await start(env.client, eu.restore_input(requested_by="bob"), "record")
                await h.result()
                await _save(env.client, "evacuation-nested-restore-01", h.id)
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(record_nested() if sys.argv[1:] == ["nested"] else record())
