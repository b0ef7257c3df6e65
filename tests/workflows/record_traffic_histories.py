"""Record histories of rollouts that know the traffic (patches `rollout-holds-for-traffic` and
`stage-rejudges-after-traffic-moves`): `python -m tests.workflows.record_traffic_histories` (about 2 minutes).

Writes the `traffic-hold-*` group (a rollout submitted while eu-west-1 was drained: it holds its wave, then goes
on once the region is back; the rollout and its stages) and `traffic-rejudge-*` (a stage whose canary window a
traffic change overlapped: it waits a fresh window and judges on that; the rollout, its stage and the evacuation)."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from tests.workflows.record_histories import _children, _save, start_recording
from tests.workflows.test_rollout_traffic import held_rollout, rejudged_rollout

GROUPS = ("traffic-hold", "traffic-rejudge")


async def record() -> None:
    env = await start_recording(GROUPS)
    client = env.client
    try:
        with tempfile.TemporaryDirectory() as tmp:
            held = await held_rollout(client, "record", Path(tmp))
            assert held.result.status == "succeeded", held.result.reason
            await _save(client, "traffic-hold", [held.rollout_id, *await _children(client, held.rollout_id)])
            again = await rejudged_rollout(client, "record", Path(tmp))
            assert again.result.status == "succeeded", again.result.reason
            assert any(a["action"] == "window-discarded" for a in again.stage_audit), again.stage_audit
            await _save(client, "traffic-rejudge",
                        [again.rollout_id, *await _children(client, again.rollout_id), again.evacuation_id])
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(record())
