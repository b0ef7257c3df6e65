"""Record histories of the peer reads run as local activities (patches `stage-confirms-locally`,
`lock-confirms-locally`, `traffic-gate-reads-locally`): `python -m tests.workflows.record_local_histories`.

Writes `local-queue-*` (a rollout holding the lock and a second one queued behind it, both to the end: the lock
confirms each acquire and release with the rollout, every stage confirms its verdict with its rollout, all by local
activities; the rollouts, their stages and the lock) and `local-traffic-*` (a rollout submitted while eu-west-1 was
drained: the traffic gate's weights and status reads as local activities; the rollout and its stages). Older groups
stay as recorded, so the replay test keeps checking rollouts begun before these patches."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from bifrost_cli.ops import outcome
from common.lock import lock_id
from tests.workflows.helpers import fleet, running_worker
from tests.workflows.record_histories import _children, _save, start_recording
from tests.workflows.test_internal_signals import holder_and_queued, rollout_state
from tests.workflows.test_rollout_traffic import held_rollout
from workflows.rollout import RolloutWorkflow
from workflows.updates import Approve

GROUPS = ("local-queue", "local-traffic")


async def record() -> None:
    env = await start_recording(GROUPS)
    client = env.client
    try:
        async with running_worker(client, fleet(), "record"):
            ha, hb, _ = await holder_and_queued(client, "record")
            service = (await rollout_state(ha)).service
            await ha.execute_update(RolloutWorkflow.approve, Approve(stage="us-east-1/test", approver="alice"))
            await outcome(ha)
            await outcome(hb)
            await _save(client, "local-queue", [ha.id, *await _children(client, ha.id), hb.id,
                                                *await _children(client, hb.id), lock_id(service)])
        with tempfile.TemporaryDirectory() as tmp:
            held = await held_rollout(client, "record", Path(tmp))
            assert held.result.status == "succeeded", held.result.reason
            await _save(client, "local-traffic", [held.rollout_id, *await _children(client, held.rollout_id)])
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(record())
