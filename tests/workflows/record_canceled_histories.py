"""Record aborted rollouts that end Canceled for the replay test: `python -m tests.workflows.record_canceled_histories`.

Writes tests/histories/canceled-abort-*.json: a rollout aborted by the `abort` update while a stage analyses, which
asks for its own cancellation (the `cancel_run` activity) and ends Canceled with its state in the memo (patch
aborted-ends-canceled), with its stages; and canceled-request-*.json: a rollout cancelled by a client (the Web UI's
Request Cancellation), which ends Canceled without asking again; canceled-evacuation-*.json: an evacuation started by
hand and aborted at its first step, which ends Canceled too. Re-record only on purpose.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from temporalio.client import WorkflowExecutionStatus

from bifrost_cli.ops import outcome
from bifrost_cli.traffic import traffic_outcome
from tests.workflows import evacuation_helpers as evac
from tests.workflows.helpers import fleet, make_request, running_worker, start
from tests.workflows.record_console_histories import cancel_as_release_manager
from tests.workflows.record_evacuation_histories import _save as save_one
from tests.workflows.record_histories import _children, _save, _wait, start_recording
from tests.workflows.test_canceled import waiting_for_its_window
from workflows.evacuation import EvacuationWorkflow
from workflows.rollout import RolloutWorkflow
from workflows.traffic_models import AbortShift
from workflows.updates import Abort

GROUPS = ("canceled-abort", "canceled-request", "canceled-evacuation")


async def record() -> None:
    env = await start_recording(GROUPS)
    client = env.client
    try:
        with tempfile.TemporaryDirectory() as tmp:
            async with running_worker(client, fleet(), "record", Path(tmp)):
                h = await start(client, make_request(canary={"analysis_minutes": 5}), "record")
                await _wait(h, lambda s: s.stage("ap-south-1/test").status == "analyzing")
                await h.execute_update(RolloutWorkflow.abort, Abort(by="erin", reason="recording"))
                assert (await outcome(h)).status == "aborted"
                assert (await h.describe()).status == WorkflowExecutionStatus.CANCELED
                await _save(client, "canceled-abort", [h.id, *await _children(client, h.id)])
                h = await start(client, waiting_for_its_window(), "record")
                await _wait(h, lambda s: s.status == "waiting_window")
                await cancel_as_release_manager(client, h.id)
                assert (await outcome(h)).status == "aborted"
                assert (await h.describe()).status == WorkflowExecutionStatus.CANCELED
                await _save(client, "canceled-request", [h.id])
            registry, _ = evac.simulated_registry(ttl=2)
            async with evac.running_worker(client, registry, "record", Path(tmp)):
                e = await evac.start(client, evac.evacuation("recorded-cancel"), "record")
                await evac.wait_for(e, lambda s: s.step == 1)
                await e.execute_update(EvacuationWorkflow.abort, AbortShift(by="dave", reason="recording"))
                state, _ = await traffic_outcome(e)
                assert state is not None and state.status == "aborted"
                assert (await e.describe()).status == WorkflowExecutionStatus.CANCELED
                await save_one(client, "canceled-evacuation-00", e.id)
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(record())
