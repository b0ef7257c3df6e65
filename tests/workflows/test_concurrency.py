"""One rollout per service: duplicate submits attach, racing versions obey queue / supersede / reject."""

from __future__ import annotations

import asyncio

import pytest

from bifrost_cli.ops import outcome, start_rollout
from tests.workflows.helpers import fleet, make_request, running_worker
from worker.endpoints import machinery_client
from workflows.lock.workflow import ServiceLockWorkflow
from workflows.rollout.workflow import RolloutWorkflow


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
    # The periodic check is an hour away: only the check a newcomer's request triggers can free the lock in time.
    async with build_worker(env.client, AdapterRegistry.simulated(fleet()), task_queue=task_queue, reports_dir=tmp_path,
                            lock_holder_check=timedelta(hours=1)):
        ha = await start_rollout(env.client, a, task_queue)
        async with asyncio.timeout(30):
            while (await ha.query(RolloutWorkflow.status)).status != "awaiting_approval":
                await asyncio.sleep(0.1)
        await ha.terminate("operator terminated it")  # it never gets to release the lock
        hb = await start_rollout(env.client, b, task_queue)
        async with asyncio.timeout(60):
            result = await outcome(hb)
        lock = await machinery_client(env.client).get_workflow_handle(f"service-lock/{a.service}").query(ServiceLockWorkflow.lock_state)
    assert result.status == "succeeded"
    assert any("ended without releasing; lock freed" in line for line in lock.log)


async def test_an_input_the_model_refuses_fails_at_once_and_holds_no_lock(env, task_queue, tmp_path):
    """A start that bypasses the CLI's checks (the UI, a script) with a request the model would refuse."""
    from temporalio.client import WorkflowFailureError
    from temporalio.exceptions import ApplicationError

    good = make_request()
    bad = good.model_dump(mode="json")
    bad["canary"]["soak_check_minutes"] = 1e-9  # would divide by zero or mean millions of looks
    bad["service_name"] = "typo"
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        handle = await env.client.start_workflow("RolloutWorkflow", bad, id=f"{good.workflow_id}/raw", task_queue=task_queue)
        async with asyncio.timeout(30):  # fails on its first workflow task instead of retrying it forever
            with pytest.raises(WorkflowFailureError) as failed:
                await handle.result()
        cause = failed.value.cause
        assert isinstance(cause, ApplicationError) and cause.type == "InvalidPayload"
        assert "canary.soak_check_minutes" in cause.message and "unknown field 'service_name'" in cause.message
        assert cause.failure is not None and cause.failure.stack_trace == ""
        # nothing was locked: the next, valid rollout of the service runs at once
        async with asyncio.timeout(60):
            result = await outcome(await start_rollout(env.client, good, task_queue))
    assert result.status == "succeeded"
