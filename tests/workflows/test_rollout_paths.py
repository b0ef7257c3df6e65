"""Rollouts on a real Temporal dev server against the simulated fleet: good path, regressions, failures."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from bifrost_cli.ops import outcome
from tests.workflows.helpers import fleet, make_request, running_worker, start
from worker.endpoints import machinery_client
from workflows.plan import build_plan


async def test_good_rollout_runs_stages_in_plan_order(env, task_queue, tmp_path: Path):
    req = make_request()
    f = fleet()
    async with running_worker(env.client, f, task_queue, tmp_path):
        handle = await start(env.client, req, task_queue)
        result = await outcome(handle)
    assert result.status == "succeeded", result.reason
    assert all(s.version_now == req.version for s in result.stages)
    promoted = [key for op, key, _ in f.calls if op == "promote"]
    assert promoted == [s.key for s in build_plan(req).stages()]
    assert all(v["primary"] == req.version for v in f.snapshot().values())
    assert all(v["canary"] is None and v["baseline"] is None for v in f.snapshot().values())


def _effect(version: str, **kw):
    return {"version": version, **kw}


async def test_regression_in_second_prod_region_rolls_back_everything_before_it(env, task_queue, tmp_path):
    req = make_request()
    f = fleet(effects=[_effect(req.version, regions=["us-east-1"], environments=["prod"], latency_factor=1.6)])
    async with running_worker(env.client, f, task_queue, tmp_path):
        handle = await start(env.client, req, task_queue)
        result = await outcome(handle)
        failing = [e async for e in machinery_client(env.client).get_workflow_handle(f"{handle.id}/us-east-1/prod").fetch_history_events()]
    assert result.status == "rolled_back"
    assert _tasks_between(failing, "analyze_canary", "rollback") == 1  # the rollback starts in the task that read the verdict
    stages = {s.key: s for s in result.stages}
    assert stages["us-east-1/prod"].verdict == "fail", result
    assert "latency_p99" in stages["us-east-1/prod"].reason
    assert result.failed_stage == "us-east-1/prod"  # the state carries which stage failed, not an attribute beside it
    # scope "all": every stage that had completed is back on the old version, newest first
    rollbacks = [key for op, key, _ in f.calls if op == "rollback"]
    assert rollbacks == ["us-east-1/prod", "us-east-1/test", "ap-south-1/prod", "ap-south-1/test"]
    assert all(s.version_now == "1.0.0" for s in result.stages)
    # no later stage was started
    assert not [c for c in f.calls if c[1].startswith("eu-west-1")]
    assert stages["eu-west-1/test"].status == "pending" and stages["eu-west-1/prod"].status == "pending"
    assert all(v["primary"] == "1.0.0" for v in f.snapshot().values())


async def test_region_scope_rolls_back_only_the_failing_region(env, task_queue, tmp_path):
    req = make_request(rollback_scope="region")
    f = fleet(effects=[_effect(req.version, regions=["us-east-1"], environments=["prod"], error_factor=8)])
    async with running_worker(env.client, f, task_queue, tmp_path):
        result = await outcome(await start(env.client, req, task_queue))
    versions = {s.key: s.version_now for s in result.stages}
    assert result.status == "rolled_back"
    assert versions == {
        "ap-south-1/test": req.version, "ap-south-1/prod": req.version,
        "us-east-1/test": "1.0.0", "us-east-1/prod": "1.0.0",
        "eu-west-1/test": "1.0.0", "eu-west-1/prod": "1.0.0",
    }


async def test_deploy_failure_rolls_back_and_names_the_error(env, task_queue, tmp_path):
    req = make_request()
    f = fleet(effects=[_effect(req.version, regions=["us-east-1"], environments=["test"], fail_deploy=True)])
    async with running_worker(env.client, f, task_queue, tmp_path):
        result = await outcome(await start(env.client, req, task_queue))
    stages = {s.key: s for s in result.stages}
    assert result.status == "rolled_back"
    assert "simulated deploy failure" in stages["us-east-1/test"].reason
    assert all(s.version_now == "1.0.0" for s in result.stages)
    assert ("promote", "us-east-1/test", req.version) not in f.calls


async def test_cancelling_a_running_rollout_rolls_back(env, task_queue, tmp_path):
    import asyncio

    req = make_request(canary={"analysis_minutes": 10})
    f = fleet()
    async with running_worker(env.client, f, task_queue, tmp_path):
        handle = await start(env.client, req, task_queue)
        async with asyncio.timeout(30):
            while not any(op == "deploy_canary" for op, _, _ in f.calls):
                await asyncio.sleep(0.05)  # poll the fleet until the canary is up, bounded by the timeout
        # the identity a cancellation request carries (the Web UI sends its user's) names who asked
        from temporalio.client import Client

        rm = await Client.connect(env.client.service_client.config.target_host, namespace=env.client.namespace,
                                  identity="rm@example.com")
        await rm.get_workflow_handle(handle.id).cancel()
        result = await outcome(handle)
    assert result.status == "aborted"
    assert result.reason.startswith("cancellation requested by rm@example.com"), result.reason
    assert ("rm@example.com", "cancel") in [(a.who, a.action) for a in result.audit]
    stages = {s.key: s for s in result.stages}
    assert stages["ap-south-1/test"].status == "rolled_back"
    assert all(s.version_now == "1.0.0" for s in result.stages)
    assert all(v["canary"] is None and v["baseline"] is None for v in f.snapshot().values())


async def test_plan_error_is_refused_before_any_deploy(env, task_queue, tmp_path):
    req = make_request(blast_radius={"prod_traffic_caps": [0.1]})
    f = fleet()
    async with running_worker(env.client, f, task_queue, tmp_path):
        handle = await start(env.client, req, task_queue)
        with pytest.raises(WorkflowFailureError) as caught:
            await handle.result()
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidRequest"
    assert "prod_traffic_caps" in cause.message
    assert cause.failure is not None and cause.failure.stack_trace == ""  # the UI shows the reason, not Python frames
    assert f.calls == []


async def test_a_stage_without_a_target_fails_before_anything_is_deployed(env, task_queue, tmp_path):
    from activities.adapters.registry import AdapterRegistry, Unconfigured
    from worker.build import build_worker

    req = make_request()
    f = fleet()
    registry = AdapterRegistry(default_deployer=Unconfigured("targets.yaml"), default_metrics=f,
                               deployers={"ap-south-1/test": f, "ap-south-1/prod": f})
    async with build_worker(env.client, registry, task_queue=task_queue, reports_dir=tmp_path):
        result = await outcome(await start(env.client, req, task_queue))
    assert result.status == "failed"
    assert "nothing was deployed" in result.reason and "has no target in targets.yaml" in result.reason
    assert [c for c in f.calls if c[0] != "rollback"] == []
    assert all(s.status == "pending" for s in result.stages)


def _tasks_between(events: list, completed: str, scheduled: str) -> int:
    """Workflow tasks completed after activity `completed` finished and before activity `scheduled` was scheduled."""
    from temporalio.api.enums.v1 import EventType

    names = {e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name for e in events
             if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED}
    done = next(e.event_id for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
                and names[e.activity_task_completed_event_attributes.scheduled_event_id] == completed)
    start = next(e.event_id for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                 and e.event_id > done and names[e.event_id] == scheduled)
    return sum(1 for e in events if done < e.event_id < start and e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
