"""Record runs stopped by a cancellation request that name who sent it, for the replay test:
`python -m tests.workflows.record_cancel_named_histories`.

Writes tests/histories/cancel-named-evacuation-00.json, an evacuation cancelled at its first step by the Web UI's
Request Cancellation, and cancel-named-revert-00.json, a revert cancelled while queued behind a rollout: each reads
who asked through the `cancel_request` activity (patch cancel-names-requester-everywhere) and ends Canceled.
Re-record only on purpose.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from temporalio.client import WorkflowExecutionStatus

from bifrost_cli.traffic import traffic_outcome
from tests.workflows import evacuation_helpers as evac
from tests.workflows.helpers import fleet, running_worker
from tests.workflows.record_console_histories import cancel_as_release_manager
from tests.workflows.record_evacuation_histories import _save
from tests.workflows.record_histories import start_recording
from tests.workflows.revert_helpers import revert_input, revert_outcome, start_revert
from tests.workflows.test_revert import _released, _running_at_a_gate
from workflows.revert import RevertWorkflow

GROUPS = ("cancel-named-evacuation", "cancel-named-revert")


async def record() -> None:
    env = await start_recording(GROUPS)
    client = env.client
    try:
        with tempfile.TemporaryDirectory() as tmp:
            registry, _ = evac.simulated_registry(ttl=2)
            async with evac.running_worker(client, registry, "record", Path(tmp)):
                e = await evac.start(client, evac.evacuation("recorded-named"), "record")
                await evac.wait_for(e, lambda s: s.step == 1)
                await cancel_as_release_manager(client, e.id)
                state, _ = await traffic_outcome(e)
                assert state is not None and "cancellation requested by rm@example.com" in state.reason, state
                assert (await e.describe()).status == WorkflowExecutionStatus.CANCELED
                await _save(client, "cancel-named-evacuation-00", e.id)
            f = fleet()
            async with running_worker(client, f, "record", Path(tmp)):
                req, _ = await _released(client, f, "record")
                running = await _running_at_a_gate(client, req.service, "record")
                h = await start_revert(client, revert_input(req.service, on_conflict="queue"), "record")
                async with asyncio.timeout(60):
                    while (await h.query(RevertWorkflow.status)).status != "queued":
                        await asyncio.sleep(0.2)
                await cancel_as_release_manager(client, h.id)
                state, _ = await revert_outcome(h)
                assert state.reason.startswith("cancellation requested by rm@example.com"), state.reason
                await _save(client, "cancel-named-revert-00", h.id)
                await running.terminate("recorded")
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(record())
