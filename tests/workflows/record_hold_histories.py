"""Record the histories of holds on failure: `python -m tests.workflows.record_hold_histories`.

- hold-retry: a one-region rollout (on_failure: hold) whose test canary fails and holds; the fleet recovers,
  alice retries (a fresh window) and the rollout succeeds (patches stage-hold-on-failure, rollout-hold-on-failure,
  notify-held; the stages' `resolve` signal confirmed with the rollout's orders).
- hold-promote: the same held stage promoted with a reason, with its sibling in the same wave told to hold
  before promotion until then.
- hold-timeout: a hold nobody decides rolls back when it times out (hold.on_timeout: rollback).
- hold-evacuate: evacuate_and_hold: eu-west-1/prod moves its traffic away, holds, is retried once the fleet
  recovers; its traffic returns before the fresh window (the stage's evacuation and restore children).
Re-record only on purpose: the replay test exists to catch changes that break these.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from activities.adapters.simulated import VersionEffect
from bifrost_cli.ops import outcome, start_rollout
from tests.workflows import evacuation_helpers as evac
from tests.workflows.helpers import fleet, make_request, running_worker
from tests.workflows.record_histories import _children, _save, _save_runs, _wait, start_recording
from workflows.rollout import RolloutWorkflow
from workflows.traffic_models import evacuation_id
from workflows.updates import ResolveHold

GROUPS = ("hold-retry", "hold-promote", "hold-timeout", "hold-evacuate")
SLOW = VersionEffect(version="2.0.0", regions=["us-east-1"], environments=["test"], latency_factor=1.8)


def _held(**overrides: object):  # type: ignore[no-untyped-def]
    data: dict[str, object] = {"regions": [{"name": "us-east-1", "traffic_share": 1.0, "on_failure": "hold"}],
                               "blast_radius": {"canary_region": None}, "approvals": {"approvers": ["alice"]}}
    data.update(overrides)
    return make_request(**data)


async def record() -> None:
    env = await start_recording(GROUPS)
    client = env.client
    try:
        f = fleet(effects=[SLOW])
        async with running_worker(client, f, "record"):
            req = _held()
            h = await start_rollout(client, req, "record")
            await _wait(h, lambda s: s.status == "held")
            f.scenario.effects = []
            await h.execute_update(RolloutWorkflow.resolve_hold,
                                   ResolveHold(stage="us-east-1/test", action="retry", by="alice", reason="recording"))
            await outcome(h)
            await _save(client, "hold-retry", [h.id, *await _children(client, h.id)])

            f.scenario.effects = [SLOW]
            req = make_request(regions=[{"name": "us-east-1", "environments": ["test"], "on_failure": "hold"},
                                        {"name": "eu-west-1", "environments": ["test"]}],
                               blast_radius={"canary_region": None, "max_parallel_regions": 2})
            h = await start_rollout(client, req, "record")
            await _wait(h, lambda s: s.status == "held")
            await h.execute_update(RolloutWorkflow.resolve_hold,
                                   ResolveHold(stage="us-east-1/test", action="promote", by="bob", reason="recording"))
            await outcome(h)
            await _save(client, "hold-promote", [h.id, *await _children(client, h.id)])

            req = _held(hold={"timeout_minutes": 0.05})
            h = await start_rollout(client, req, "record")
            await outcome(h)
            await _save(client, "hold-timeout", [h.id, *await _children(client, h.id), f"service-lock/{req.service}"])
        registry, traffic_fleet = evac.simulated_registry()
        req = make_request(regions=[{"name": "us-east-1", "traffic_share": 0.5},
                                    {"name": "eu-west-1", "traffic_share": 0.3, "on_failure": "evacuate_and_hold"},
                                    {"name": "ap-south-1", "traffic_share": 0.2}],
                           evacuation={"steps": [50, 0], "health_check_minutes": 0.02, "health_interval_seconds": 1,
                                       "min_samples": 3})
        traffic_fleet.scenario.effects.append(
            VersionEffect(version=req.version, regions=["eu-west-1"], environments=["prod"], latency_factor=1.6))
        with tempfile.TemporaryDirectory() as tmp:
            async with evac.running_worker(client, registry, "record", Path(tmp)):
                h = await start_rollout(client, req, "record")
                async with asyncio.timeout(300):
                    while (await h.query(RolloutWorkflow.status)).status != "held":
                        await asyncio.sleep(0.2)
                traffic_fleet.scenario.effects = []
                await h.execute_update(RolloutWorkflow.resolve_hold,
                                       ResolveHold(stage="eu-west-1/prod", action="retry", by="alice", reason="recording"))
                await outcome(h)
                await _save(client, "hold-evacuate", [h.id, *await _children(client, h.id)])
                await _save_runs(client, "hold-evacuate-traffic", evacuation_id(req.service))
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(record())
