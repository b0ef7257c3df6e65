"""Record the console round-2 histories for the replay test: `python -m tests.workflows.record_console_histories`.

Writes tests/histories/console-cancel-*.json: a rollout that waits at its last gate (BifrostEnvironment stays
`prod`: patch search-furthest-environment) and is cancelled by a client with an identity, which it names
(cancel-names-requester), with its stages, rolled back on its order and completed (ordered-rollback-completes);
and console-evacuation-aborted-*.json: an evacuation aborted at its first step, which ended as a failure of type
Aborted (evacuation-aborted-fails) when it was recorded; recorded again today, it ends Canceled (aborted-ends-canceled,
see record_canceled_histories.py). Re-record only on purpose.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import CancelledError

from bifrost_cli.ops import outcome
from tests.workflows import evacuation_helpers as evac
from tests.workflows.helpers import fleet, make_request, running_worker, start
from tests.workflows.record_evacuation_histories import _save as save_one
from tests.workflows.record_histories import _children, _save, start_recording
from workflows.evacuation import EvacuationWorkflow
from workflows.rollout import RolloutWorkflow
from workflows.traffic_models import AbortShift

GROUPS = ("console-cancel", "console-evacuation-aborted")


async def _wait(handle, pred) -> None:  # type: ignore[no-untyped-def]
    """Poll the status query until `pred` holds (a loaded machine runs five waves slowly)."""
    async with asyncio.timeout(300):
        while not pred(await handle.query(RolloutWorkflow.status)):
            await asyncio.sleep(0.2)


async def cancel_as_release_manager(client: Client, workflow_id: str) -> None:
    """Request the cancellation as the Web UI does for a signed-in user: with the identity rm@example.com."""
    rm = await Client.connect(client.service_client.config.target_host, namespace=client.namespace,
                              identity="rm@example.com")
    await rm.get_workflow_handle(workflow_id).cancel()


async def record() -> None:
    env = await start_recording(GROUPS)
    client = env.client
    try:
        with tempfile.TemporaryDirectory() as tmp:
            async with running_worker(client, fleet(), "record", Path(tmp)):
                h = await start(client, make_request(approvals={"gates": [{"wave": 6}]}), "record")
                await _wait(h, lambda s: s.status == "awaiting_approval")
                await cancel_as_release_manager(client, h.id)
                ended = await outcome(h)
                assert ended.reason.startswith("cancellation requested by rm@example.com"), ended.reason
                await _save(client, "console-cancel", [h.id, *await _children(client, h.id)])
            registry, _ = evac.simulated_registry(ttl=2)
            async with evac.running_worker(client, registry, "record", Path(tmp)):
                e = await evac.start(client, evac.evacuation("recorded-abort"), "record")
                await evac.wait_for(e, lambda s: s.step == 1)
                await e.execute_update(EvacuationWorkflow.abort, AbortShift(by="dave", reason="recording"))
                try:
                    await e.result()
                except WorkflowFailureError as err:
                    assert getattr(err.cause, "type", None) == "Aborted" or isinstance(err.cause, CancelledError), err.cause
                else:
                    raise AssertionError("the aborted evacuation completed")
                await save_one(client, "console-evacuation-aborted-00", e.id)
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(record())
