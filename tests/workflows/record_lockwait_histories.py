"""Record histories of a rollout re-checking the lock while it waits (patch `lock-wait-rechecks`):
`python -m tests.workflows.record_lockwait_histories` (about 4 minutes: the re-check interval runs in real time).
Writes only the `lockwait-*` group; older groups keep the shapes of rollouts begun before this patch."""

from __future__ import annotations

import asyncio

from bifrost_cli.ops import outcome, start_rollout
from tests.workflows.helpers import first_true_answer_unconfirmable, fleet, make_request, running_worker
from tests.workflows.record_histories import _children, _save, start_recording

GROUPS = ("lockwait-regrant",)
ONE_REGION = {"regions": [{"name": "us-east-1", "traffic_share": 1.0}], "blast_radius": {"canary_region": None}}


async def record() -> None:
    env = await start_recording(GROUPS)
    client = env.client
    try:
        # a rollout whose true grant could not be confirmed once: ignored, then taken by its own re-check
        req = make_request(**ONE_REGION)
        with first_true_answer_unconfirmable() as failed:
            async with running_worker(client, fleet(), "record"):
                h = await start_rollout(client, req, "record")
                result = await outcome(h)
        assert failed == [h.id] and result.status == "succeeded", (failed, result.status, result.reason)
        await _save(client, "lockwait-regrant", [h.id, *await _children(client, h.id), f"service-lock/{req.service}"])
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(record())
