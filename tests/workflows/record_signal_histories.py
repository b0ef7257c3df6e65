"""Record histories of the confirmed internal signals (patches `lock-signals-confirmed`, `stage-signals-confirmed`):
`python -m tests.workflows.record_signal_histories`. Writes only the `signals-*` groups; older groups stay as
they were recorded, so the replay test keeps checking the shapes of rollouts begun before these patches."""

from __future__ import annotations

import asyncio

from bifrost_cli.ops import outcome, start_rollout
from tests.workflows.helpers import fleet, make_request, running_worker
from tests.workflows.record_histories import _children, _save, _wait, start_recording
from workflows.rollout import RolloutWorkflow
from workflows.updates import Approve, Pause, Resume, SkipSoak

GROUPS = ("signals-queue", "signals-regression", "signals-skip-soak")
ONE_REGION = {"regions": [{"name": "us-east-1", "traffic_share": 1.0}], "blast_radius": {"canary_region": None}}


async def record() -> None:
    env = await start_recording(GROUPS)
    client = env.client
    try:
        async with running_worker(client, fleet(), "record"):
            # 1. a gated rollout holding the lock, a second one queued behind it; pause and resume while its first
            # stage waits for the verdict; forged signals to each workflow, ignored; then both run to the end.
            a = make_request(approvals={"gates": [{"wave": 2}], "approvers": ["alice"]}, **ONE_REGION)
            b = make_request(service=a.service, version="2.1.0", **ONE_REGION)
            ha = await start_rollout(client, a, "record")
            await _wait(ha, lambda s: s.status == "awaiting_approval")
            hb = await start_rollout(client, b, "record")
            await _wait(hb, lambda s: s.status == "queued")
            await ha.execute_update(RolloutWorkflow.pause, Pause(by="carol", reason="recording"))
            await ha.execute_update(RolloutWorkflow.resume, Resume(by="carol"))
            await hb.signal("lock_granted", a.service)
            await ha.signal("superseded", "9.9.9")
            await client.get_workflow_handle(f"service-lock/{a.service}").signal("release", ha.id)
            await client.get_workflow_handle(f"{ha.id}/us-east-1/test").signal("skip_soak", "mallory")
            await ha.signal("stage_progress", {"key": "us-east-1/prod", "region": "us-east-1", "environment": "prod",
                                               "status": "succeeded", "verdict": "pass"})
            await _wait(ha, lambda s: len(s.audit) >= 6)
            await _wait(hb, lambda s: any(e.action == "ignored lock_granted" for e in s.audit))
            await ha.execute_update(RolloutWorkflow.approve, Approve(wave=2, approver="alice", comment="ok"))
            await outcome(ha)
            await outcome(hb)
            await _save(client, "signals-queue", [ha.id, *await _children(client, ha.id), hb.id,
                                                  *await _children(client, hb.id), f"service-lock/{a.service}"])
            # 2. a regression in the second production region: stop and roll-back verdicts, confirmed by the stages
            bad = make_request(version="2.0.1")
            f = fleet(effects=[{"version": "2.0.1", "regions": ["us-east-1"], "environments": ["prod"], "latency_factor": 1.6}])
        async with running_worker(client, f, "record"):
            h = await start_rollout(client, bad, "record")
            await outcome(h)
            await _save(client, "signals-regression", [h.id, *await _children(client, h.id)])
            # 3. a soak ended by the skip_soak update
            soak = make_request(soak={"prod_hours": 2}, canary={"soak_check_minutes": 30}, approvals={"approvers": ["alice"]},
                                regions=[{"name": "us-east-1", "traffic_share": 1.0, "environments": ["prod"]}],
                                blast_radius={"canary_region": None})
            h = await start_rollout(client, soak, "record")
            await _wait(h, lambda s: s.stages[0].status == "soaking")
            await h.execute_update(RolloutWorkflow.skip_soak, SkipSoak(stage="us-east-1/prod", by="alice", reason="recording"))
            await outcome(h)
            await _save(client, "signals-skip-soak", [h.id, *await _children(client, h.id)])
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(record())
