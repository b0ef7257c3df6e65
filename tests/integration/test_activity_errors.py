"""What a workflow sees when an activity fails, on the real dev server: Bifrost's one line, never the client's dump.

Also the heartbeat helper: it keeps a long activity alive within a short heartbeat timeout, lets a
cancellation reach it, and a worker that stops heartbeating is reported in words.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment
from temporalio.worker import Worker

from activities.adapters.kubernetes.deployer import KubernetesDeployer, KubeSettings, kube_api_client
from activities.adapters.registry import AdapterRegistry
from activities.adapters.simulated import FleetScenario, SimulatedFleet
from activities.analysis import AnalysisActivities
from activities.deploy import DeployActivities
from activities.errors import error_text
from activities.heartbeat import heartbeating
from activities.models import AnalysisInput, StageOnly
from canary.config import JudgeConfig, MetricSpec
from common.types import MetricWindow, StageRef
from tests.fakes.kube_api import FakeKubeApi
from tests.integration.conftest import assert_one_line

pytestmark = pytest.mark.integration

STAGE = StageRef(service="checkout", region="us-east-1", environment="prod")
ONCE = RetryPolicy(maximum_attempts=1)


@workflow.defn(sandboxed=False)
class FailureProbe:
    """Runs one activity and reports what the workflow caught, the way the stage workflow would see it."""

    @workflow.run
    async def run(self, activity_name: str, arg: Any, heartbeat_seconds: float) -> dict[str, Any]:
        try:
            await workflow.execute_activity(
                activity_name, arg, start_to_close_timeout=timedelta(seconds=30),
                heartbeat_timeout=timedelta(seconds=heartbeat_seconds), retry_policy=ONCE,
            )
        except ActivityError as err:
            chain, cur = [], err.cause
            while cur is not None:
                chain.append(f"{type(cur).__name__}: {cur}")
                cur = cur.__cause__
            cause = err.cause
            details = list(cause.details) if isinstance(cause, ApplicationError) else []
            return {"text": error_text(err), "chain": chain, "details": details}
        return {"text": "", "chain": [], "details": []}


@activity.defn
async def silent_sleeper(seconds: float) -> None:
    """Never heartbeats: stands in for a worker that died or hung."""
    await asyncio.sleep(seconds)


@activity.defn
async def beating_sleeper(seconds: float) -> str:
    """Heartbeats only through the helper; returns how it ended."""
    try:
        async with heartbeating("sleeping", every=0.2):
            await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        CANCELLED.set()
        raise
    return "done"


CANCELLED = asyncio.Event()


async def probe(client: Client, task_queue: str, name: str, arg: Any, heartbeat: float, activities: list) -> dict[str, Any]:
    async with Worker(client, task_queue=task_queue, workflows=[FailureProbe], activities=activities):
        return await client.execute_workflow(FailureProbe.run, args=[name, arg, heartbeat], id=f"probe-{task_queue}",
                                             task_queue=task_queue)


async def test_a_forbidden_delete_reaches_the_workflow_as_bifrosts_one_line(env: WorkflowEnvironment, task_queue: str):
    with FakeKubeApi(tick_seconds=0.02) as kube:
        kube.seed_primary("shop", "checkout", "registry.example.com/checkout:1.0.0")
        deployer = KubernetesDeployer(lambda: kube_api_client(api_url=kube.url), KubeSettings(namespace="shop", poll_seconds=0.02))
        await deployer.deploy(STAGE, "canary", "1.1.0", "registry.example.com/checkout:1.1.0", 1)
        kube.fail_next(10, 403, method="DELETE", path_contains="checkout-canary")
        deploy = DeployActivities(AdapterRegistry(default_deployer=deployer, default_metrics=SimulatedFleet()))
        seen = await probe(env.client, task_queue, "cleanup", StageOnly(stage=STAGE), 15, [deploy.cleanup])

    expected = ("could not remove the canary in us-east-1/prod: 403 Forbidden on DELETE deployments/shop/checkout-canary")
    assert_one_line(seen["text"], expected, "grant delete on deployments in namespace shop to the worker's service account")
    # Nothing is chained under Bifrost's ApplicationError: no ApiException dump for the UI or `_error_text` to find.
    # (str() of an ApplicationError puts its type first; its `.message`, which error_text uses, is the line alone.)
    assert len(seen["chain"]) == 1 and seen["chain"][0].startswith(f"ApplicationError: DeployError: {expected}"), seen["chain"]
    fields = seen["details"][0]
    assert fields["status"] == "403 Forbidden" and fields["target"] == "DELETE deployments/shop/checkout-canary"
    assert fields["retryable"] is False and "check the worker's RBAC" in fields["hint"]


async def test_a_worker_that_stops_heartbeating_is_reported_in_words(env: WorkflowEnvironment, task_queue: str):
    seen = await probe(env.client, task_queue, "silent_sleeper", 10.0, 1, [silent_sleeper])
    assert seen["text"].startswith("activity silent_sleeper timed out: no heartbeat within its heartbeat timeout"), seen


async def test_the_heartbeat_helper_keeps_a_long_activity_alive_past_a_short_heartbeat_timeout(env: WorkflowEnvironment,
                                                                                               task_queue: str):
    async with Worker(env.client, task_queue=task_queue, workflows=[FailureProbe], activities=[beating_sleeper]):
        result = await env.client.execute_workflow(
            FailureProbe.run, args=["beating_sleeper", 3.0, 1], id=f"probe-{task_queue}", task_queue=task_queue)
    assert result == {"text": "", "chain": [], "details": []}  # 3 s of work under a 1 s heartbeat timeout


@workflow.defn(sandboxed=False)
class CancelProbe:
    @workflow.run
    async def run(self) -> str:
        handle = workflow.start_activity(beating_sleeper, 60.0, start_to_close_timeout=timedelta(seconds=90),
                                         heartbeat_timeout=timedelta(seconds=5), retry_policy=ONCE)
        await workflow.sleep(1)
        handle.cancel()
        try:
            await handle
        except ActivityError as err:
            return error_text(err)
        return "not cancelled"


async def test_a_cancellation_reaches_an_activity_that_only_the_helper_heartbeats(env: WorkflowEnvironment, task_queue: str):
    CANCELLED.clear()
    async with Worker(env.client, task_queue=task_queue, workflows=[CancelProbe], activities=[beating_sleeper]):
        text = await env.client.execute_workflow(CancelProbe.run, id=f"cancel-{task_queue}", task_queue=task_queue)
        await asyncio.wait_for(CANCELLED.wait(), timeout=10)  # the activity body itself saw the cancellation
    assert text == "activity beating_sleeper was cancelled", text


async def test_the_helper_beats_on_its_interval_and_stops_with_the_body():
    beats: list[tuple] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)

    async def body() -> None:
        async with heartbeating("working", every=0.05):
            await asyncio.sleep(0.5)

    await env.run(body)
    after = len(beats)
    assert after >= 4 and all(b == ("working",) for b in beats), beats
    await asyncio.sleep(0.2)
    assert len(beats) == after  # the background task ended with the body


async def test_the_analysis_activity_heartbeats_while_it_judges(tmp_path):
    beats: list[tuple] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)
    analysis = AnalysisActivities(AdapterRegistry.simulated(SimulatedFleet(FleetScenario(fresh_draws=False, min_samples=60))), tmp_path)
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    inp = AnalysisInput(
        stage=STAGE, rollout_id="rollout/checkout/1.1.0", analysis_id="us-east-1-prod-canary",
        metrics=[MetricSpec(name="latency_p99", kind="latency", direction="increase")], judge=JudgeConfig(min_samples=30),
        window=MetricWindow(start=now - timedelta(minutes=60), end=now, interval_seconds=60),
        baseline_version="1.0.0", canary_version="1.1.0",
    )
    result = await env.run(analysis.analyze_canary, inp)
    assert result.result.verdict == "pass" and beats and beats[0] == ("judge canary 1.1.0 in us-east-1/prod",)
