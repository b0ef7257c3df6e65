"""Record region-guard histories for the replay test: `python -m tests.workflows.record_guard_histories`.

Writes tests/histories/guard-*.json, every run of one guard chain (it continues as new every 3 looks): a
degraded region proposed, paused and resumed, approved, evacuated through the evacuation child, the region
healed and restored after the hold-down, then stopped. Re-record only on purpose.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from tests.workflows.evacuation_helpers import running_worker
from tests.workflows.record_histories import start_recording
from tests.workflows.test_guard import fleet_with, guard_input, start, wait_for
from workflows.guard import RegionGuardWorkflow
from workflows.guard_models import ApproveGuard, StopGuard
from workflows.updates import Pause, Resume

OUT = Path(__file__).resolve().parent.parent / "histories"


async def record() -> None:
    env = await start_recording(("guard",))
    try:
        registry, fleet = fleet_with({"eu-west-1": 3.0})
        with tempfile.TemporaryDirectory() as tmp:
            async with running_worker(env.client, registry, "record", Path(tmp)):
                h = await start(env.client, guard_input("recorded", rules={"mode": "propose"}, looks_per_run=3), "record")
                await wait_for(h, lambda s: bool(s.proposals))
                await h.execute_update(RegionGuardWorkflow.pause, Pause(by="carol", reason="recording"))
                await h.execute_update(RegionGuardWorkflow.resume, Resume(by="carol"))
                await h.execute_update(RegionGuardWorkflow.approve, ApproveGuard(region="eu-west-1", approver="alice"))
                await wait_for(h, lambda s: any(d.action == "evacuated" for d in s.decisions))
                fleet.scenario.effects.clear()
                await wait_for(h, lambda s: any(d.action == "restored" for d in s.decisions))
                await h.execute_update(RegionGuardWorkflow.stop, StopGuard(by="alice", reason="recorded"))
                await h.result()
                runs = [wf async for wf in env.client.list_workflows(f"WorkflowId = '{h.id}'")]
                for i, wf in enumerate(sorted(runs, key=lambda wf: wf.start_time)):
                    history = await env.client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()
                    path = OUT / f"guard-{i:02d}.json"
                    path.write_text(json.dumps({"workflow_id": wf.id, "history": json.loads(history.to_json())}, indent=1))
                    print(f"wrote {path.relative_to(OUT.parent.parent)}")
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(record())
