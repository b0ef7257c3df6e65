"""Record histories of reverts for the replay test: `python -m tests.workflows.record_revert_histories` (about a minute).

Writes only the `revert-*` groups: a revert that evacuated a production region and brought its traffic back
(the revert, then its evacuation and restore), a revert refused while a rollout of the service ran, a revert aborted
while queued (it asks for its own cancellation and ends Canceled, its state in the memo: patch
aborted-revert-ends-canceled), and a revert queued behind a running rollout (it tells people, then undoes that rollout
once it ends). Name groups to record only those: `python -m tests.workflows.record_revert_histories revert-queued`."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from temporalio.client import WorkflowExecutionStatus

from bifrost_cli.ops import outcome, start_rollout
from tests.workflows.evacuation_helpers import running_worker, simulated_registry
from tests.workflows.helpers import make_request
from tests.workflows.record_histories import _save, _save_runs, start_recording
from tests.workflows.revert_helpers import listed_closed, revert_input, revert_outcome, start_revert
from workflows.traffic_models import evacuation_id

GROUPS = ("revert-reverted", "revert-evacuation", "revert-refused", "revert-aborted", "revert-queued")
QUICK = {"steps": [0], "health_interval_seconds": 1, "min_samples": 3, "health_check_minutes": 1 / 60}


async def record(groups: tuple[str, ...] = GROUPS) -> None:
    env = await start_recording(groups)
    client = env.client
    registry, _ = simulated_registry(ttl=1)
    try:
        async with running_worker(client, registry, "record", Path(tempfile.mkdtemp())):
            req = make_request(evacuation=QUICK)
            await outcome(await start_rollout(client, req, "record"))
            await listed_closed(client, req.workflow_id)
            if "revert-reverted" in groups or "revert-evacuation" in groups:
                h = await start_revert(client, revert_input(req.service, evacuate=True,
                                                            stages=["eu-west-1/prod", "eu-west-1/test"]), "record")
                state, _ = await revert_outcome(h)
                assert state.status == "reverted", state.reason
                await _save(client, "revert-reverted", [h.id])
                await _save_runs(client, "revert-evacuation", evacuation_id(req.service))

            gated = make_request(service=req.service, version="2.1.0", approvals={"gates": [{"wave": 2}]})
            running = await start_rollout(client, gated, "record")
            async with asyncio.timeout(60):
                while (await running.query("status")).get("status") != "awaiting_approval":
                    await asyncio.sleep(0.2)
            if "revert-refused" in groups:
                refused = await start_revert(client, revert_input(req.service, to_version="1.0.0",
                                                                  reason="recorded while 2.1.0 runs"), "record")
                state, _ = await revert_outcome(refused)
                assert state.status == "rejected", state.reason
                await _save(client, "revert-refused", [refused.id])
            if "revert-aborted" in groups:
                aborted = await start_revert(client, revert_input(req.service, to_version="1.0.0", on_conflict="queue",
                                                                  reason="recorded aborted while queued"), "record")
                async with asyncio.timeout(60):
                    while (await aborted.query("status"))["status"] != "queued":
                        await asyncio.sleep(0.2)
                await aborted.execute_update("abort", {"by": "carol", "reason": "recorded"})
                state, _ = await revert_outcome(aborted)
                assert state.status == "aborted", state.reason
                assert (await aborted.describe()).status == WorkflowExecutionStatus.CANCELED
                await _save(client, "revert-aborted", [aborted.id])
            if "revert-queued" in groups:
                queued = await start_revert(client, revert_input(req.service, to_version="1.0.0", on_conflict="queue",
                                                                 reason="recorded queued behind 2.1.0"), "record")
                async with asyncio.timeout(60):  # its queued notice goes out after QUEUED_NOTICE_AFTER
                    while not any(a["action"] == "queued" for a in (await queued.query("status"))["audit"]):
                        await asyncio.sleep(0.2)
                await running.execute_update("approve", {"wave": 2, "approver": "bob", "comment": "recorded"})
                await outcome(running)
                state, _ = await revert_outcome(queued)
                assert state.status == "reverted", state.reason
                await _save(client, "revert-queued", [queued.id])
            else:
                await running.terminate("recorded")
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(record(tuple(sys.argv[1:]) or GROUPS))
