"""One rollout per service: duplicate submits attach, racing versions obey queue / supersede / reject."""

from __future__ import annotations

import asyncio

from bifrost_cli.ops import outcome, start_rollout
from tests.workflows.helpers import fleet, make_request, running_worker
from workflows.lock import ServiceLockWorkflow
from workflows.rollout import RolloutWorkflow


async def test_duplicate_submits_give_one_rollout(env, task_queue, tmp_path):
    req = make_request()
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        handles = await asyncio.gather(*(start_rollout(env.client, req, task_queue) for _ in range(3)))
        assert len({h.result_run_id for h in handles}) == 1
        result = await outcome(handles[0])
    assert result.status == "succeeded"
    count = await env.client.count_workflows(f"WorkflowId = '{req.workflow_id}'")
    assert count.count == 1


async def _race(env, task_queue, tmp_path, policy: str):
    one_region = {"regions": [{"name": "us-east-1", "traffic_share": 1.0}], "blast_radius": {"canary_region": None}}
    a = make_request(on_conflict=policy, **one_region)
    b = make_request(service=a.service, version="2.1.0", on_conflict=policy, **one_region)
    f = fleet()
    async with running_worker(env.client, f, task_queue, tmp_path):
        ha, hb = await asyncio.gather(start_rollout(env.client, a, task_queue), start_rollout(env.client, b, task_queue))
        ra, rb = await asyncio.gather(outcome(ha), outcome(hb))
    return f, {a.version: ra, b.version: rb}


def _deploy_ops(f, version):
    return [i for i, (op, _, v) in enumerate(f.calls) if v == version and op in ("deploy_canary", "promote")]


async def test_racing_submits_queue_one_after_the_other(env, task_queue, tmp_path):
    f, results = await _race(env, task_queue, tmp_path, "queue")
    assert {r.status for r in results.values()} == {"succeeded"}
    first, second = sorted(results, key=lambda v: _deploy_ops(f, v)[0])
    assert max(_deploy_ops(f, first)) < min(_deploy_ops(f, second)), "the two rollouts overlapped"
    assert all(v["primary"] == second for v in f.snapshot().values())


async def test_racing_submits_reject_the_later_one(env, task_queue, tmp_path):
    f, results = await _race(env, task_queue, tmp_path, "reject")
    statuses = sorted(r.status for r in results.values())
    assert statuses == ["rejected", "succeeded"]
    loser = next(v for v, r in results.items() if r.status == "rejected")
    assert "not started" in results[loser].reason
    assert _deploy_ops(f, loser) == []  # nothing of the refused version was deployed


async def test_racing_submits_supersede_the_earlier_one(env, task_queue, tmp_path):
    f, results = await _race(env, task_queue, tmp_path, "supersede")
    statuses = sorted(r.status for r in results.values())
    assert statuses == ["aborted", "succeeded"], [(r.status, r.reason, [(x.key, x.status, x.reason) for x in r.stages]) for r in results.values()]
    loser = next(v for v, r in results.items() if r.status == "aborted")
    winner = next(v for v, r in results.items() if r.status == "succeeded")
    assert "superseded by" in results[loser].reason
    assert all(s.version_now != loser for s in results[loser].stages)
    if _deploy_ops(f, loser):  # the loser had started: its deploys all precede the winner's
        assert max(_deploy_ops(f, loser)) < min(_deploy_ops(f, winner))
    assert all(v["primary"] == winner for v in f.snapshot().values())


async def test_a_terminated_rollout_does_not_hold_the_lock_forever(env, task_queue, tmp_path):
    from datetime import timedelta

    from activities.adapters.registry import AdapterRegistry
    from worker.build import build_worker

    one_region = {"regions": [{"name": "us-east-1", "traffic_share": 1.0}], "blast_radius": {"canary_region": None}}
    a = make_request(approvals={"gates": [{"stage": "us-east-1/test"}]}, **one_region)
    b = make_request(service=a.service, version="2.1.0", **one_region)
    async with build_worker(env.client, AdapterRegistry.simulated(fleet()), task_queue=task_queue, reports_dir=tmp_path,
                            lock_holder_check=timedelta(seconds=2)):
        ha = await start_rollout(env.client, a, task_queue)
        async with asyncio.timeout(30):
            while (await ha.query(RolloutWorkflow.status)).status != "awaiting_approval":
                await asyncio.sleep(0.1)
        await ha.terminate("operator terminated it")  # it never gets to release the lock
        hb = await start_rollout(env.client, b, task_queue)
        async with asyncio.timeout(60):
            result = await outcome(hb)
        lock = await env.client.get_workflow_handle(f"service-lock/{a.service}").query(ServiceLockWorkflow.lock_state)
    assert result.status == "succeeded"
    assert any("ended without releasing; lock freed" in line for line in lock.log)
