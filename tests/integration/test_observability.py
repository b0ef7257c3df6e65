"""The real Prometheus scrapes a worker's metrics endpoint (1 s) during a rollout and gets Bifrost's metrics back.

The rollout waits at an approval gate, then fails its canary in eu-west-1/prod, whose `on_failure: evacuate`
moves the traffic away and back: verdicts, a gate wait, traffic weights and stage outcomes all reach Prometheus
beside the SDK's own temporal_* worker metrics.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from activities.adapters.simulated import VersionEffect
from bifrost_cli.ops import outcome
from tests.conftest import require_or_skip
from tests.integration.promdata import PrometheusProcess
from tests.workflows.evacuation_helpers import running_worker, simulated_registry
from tests.workflows.helpers import make_request, start
from worker.converter import DATA_CONVERTER
from worker.telemetry import metrics_runtime
from workflows.rollout.updates import Approve
from workflows.rollout.workflow import RolloutWorkflow

pytestmark = pytest.mark.integration

EVACUATE_FAST = {"steps": [50, 0], "health_check_minutes": 0.02, "health_interval_seconds": 1, "min_samples": 3}
GATED = {"gates": [{"stage": "us-east-1/prod"}], "approvers": ["alice"]}


def _query(prom: str, expr: str) -> list[dict[str, Any]]:
    body = httpx.get(f"{prom}/api/v1/query", params={"query": expr}, timeout=5).json()
    assert body["status"] == "success", body
    return list(body["data"]["result"])


async def _until_present(prom: str, expr: str, timeout: float = 60.0,
                         ok: Callable[[list[dict[str, Any]]], bool] = bool) -> list[dict[str, Any]]:
    """Poll Prometheus until `expr` returns a sample, or one `ok` accepts (scrapes come every second, targets are
    found within ~5 s); the last answer after `timeout`. A series that exists may still show a value scraped before
    the run's last change: wait for the value itself with `ok`."""
    deadline = time.monotonic() + timeout
    while True:
        result = await asyncio.to_thread(_query, prom, expr)
        if ok(result) or time.monotonic() > deadline:
            return result
        await asyncio.sleep(0.5)


def _by_region(weights: list[dict[str, Any]]) -> dict[str, float]:
    return {w["metric"]["region"]: float(w["value"][1]) for w in weights}


async def _wait_status(handle: Any, status: str, timeout: float = 60.0) -> None:
    async with asyncio.timeout(timeout):
        while (await handle.query(RolloutWorkflow.status)).status != status:
            await asyncio.sleep(0.1)


async def test_prometheus_scrapes_bifrost_metrics_during_a_rollout(env, task_queue, tmp_path: Path) -> None:
    if shutil.which("prometheus") is None:
        require_or_skip("Prometheus", "prometheus not on PATH (apt-get install prometheus)")
    runtime, address = metrics_runtime("127.0.0.1", 0)
    client = await Client.connect(env.client.service_client.config.target_host, namespace=env.client.namespace,
                                  data_converter=DATA_CONVERTER, runtime=runtime)
    prom = PrometheusProcess(tmp_path / "prometheus", [], scrape=[address], scrape_interval="1s").start()
    try:
        registry, fleet = simulated_registry()
        regions = [{"name": "us-east-1", "traffic_share": 0.5},
                   {"name": "eu-west-1", "traffic_share": 0.3, "on_failure": "evacuate"},
                   {"name": "ap-south-1", "traffic_share": 0.2}]
        req = make_request(regions=regions, evacuation=EVACUATE_FAST, approvals=GATED)
        fleet.scenario.effects.append(VersionEffect(version=req.version, regions=["eu-west-1"], environments=["prod"],
                                                    latency_factor=1.6))
        svc = f'service="{req.service}"'
        async with running_worker(client, registry, task_queue, tmp_path):
            handle = await start(client, req, task_queue)
            await _wait_status(handle, "awaiting_approval")
            # scraped while the rollout waits at its gate
            waiting = await _until_present(prom.url, f'bifrost_rollout_status_entered_total{{{svc},status="awaiting_approval"}}')
            assert waiting and float(waiting[0]["value"][1]) == 1.0, waiting
            await handle.execute_update(RolloutWorkflow.approve, Approve(stage="us-east-1/prod", approver="alice"))
            result = await outcome(handle)
        assert result.status == "rolled_back"

        gate = await _until_present(prom.url, f'sum(bifrost_rollout_wait_seconds_count{{{svc},gate="approval"}})')
        assert gate and float(gate[0]["value"][1]) == 1.0, gate
        left = await _until_present(prom.url, f'bifrost_rollout_status_left_total{{{svc},status="awaiting_approval"}}')
        assert left and float(left[0]["value"][1]) == 1.0, left

        verdicts = await _until_present(
            prom.url, 'sum by (region, environment, verdict) (bifrost_canary_analyses_total{verdict="fail"})')
        assert {(v["metric"]["region"], v["metric"]["environment"]) for v in verdicts} >= {("eu-west-1", "prod")}, verdicts
        both = {"test", "prod"}
        passed = await _until_present(prom.url, 'sum by (environment) (bifrost_canary_analyses_total{verdict="pass"})',
                                      ok=lambda r: {v["metric"]["environment"] for v in r} >= both)
        assert {v["metric"]["environment"] for v in passed} >= both, passed

        # the restore is the failed stage's last act, just before the rollout ends: the gauges exist since the
        # evacuation began, and the last scrape may predate the restore, so wait for the restored values themselves
        restored = {"us-east-1": 100.0, "eu-west-1": 100.0, "ap-south-1": 100.0}
        weights = await _until_present(prom.url, f'bifrost_traffic_weight{{{svc},environment="prod"}}',
                                       ok=lambda r: _by_region(r) == restored)
        assert len(weights) == 3, weights  # one series per region, whichever activity read or set it
        assert _by_region(weights) == restored, weights
        steps = await _until_present(prom.url, f'sum(bifrost_evacuation_steps_total{{{svc},region="eu-west-1"}})')
        assert steps and float(steps[0]["value"][1]) >= 2, steps  # evacuate 50 → 0, then restore
        evacuated = await _until_present(
            prom.url, f'bifrost_evacuation_status_entered_total{{{svc},region="eu-west-1",status="evacuated"}}')
        assert evacuated, "the evacuation's end never reached Prometheus"

        ended = await _until_present(prom.url, 'sum by (outcome) (bifrost_stages_ended_total{region="eu-west-1",environment="prod"})')
        assert {e["metric"]["outcome"] for e in ended} >= {"rolled_back"}, ended
        durations = await _until_present(prom.url, 'bifrost_stage_duration_seconds_count{outcome="rolled_back"}')
        assert durations, "stage durations never reached Prometheus"

        # the SDK's own worker metrics come from the same endpoint
        sdk = await _until_present(prom.url, 'temporal_workflow_task_execution_latency_bucket')
        assert sdk, "Temporal's worker metrics are missing from the endpoint"
        targets = httpx.get(f"{prom.url}/api/v1/targets", timeout=5).json()["data"]["activeTargets"]
        assert [t["health"] for t in targets] == ["up"], targets
    finally:
        prom.stop()
