"""A forbidden DELETE during cleanup (issue #13, item 2): rollouts on the real dev server, deploying through the
Kubernetes deployer (official client) to the fake API server, which answers every DELETE with 403 Forbidden.

After a successful promotion the new version stays and the stage succeeds, its reason naming the leftover in
one line. After a failed judgement or a soak alarm the primary is still put back on the old version, and
the stage rolls back naming both the failure and the leftover. The metrics come from the simulated fleet
(a targets file may pair any deployer with any metric source), so the canary's fate is chosen per test.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import WorkflowExecutionStatus

from activities.adapters.registry import registry_from_targets
from activities.adapters.reports import NoReports
from activities.adapters.simulated import FleetScenario, SimulatedFleet
from activities.adapters.targets import load_targets
from bifrost_cli.ops import outcome
from tests.fakes.kube_api import FakeKubeApi
from tests.integration.conftest import assert_one_line
from tests.workflows.helpers import METRICS
from worker.build import build_worker
from worker.endpoints import machinery_client
from workflows.request import RolloutRequest, parse_request
from workflows.rollout.models import RolloutState
from workflows.rollout.workflow import RolloutWorkflow

pytestmark = pytest.mark.integration

NS, WORKLOAD, KEY = "shop", "checkout", "us-east-1/prod"
OLD, NEW = "1.0.0", "1.1.0"
IMAGE = "registry.example.com/checkout:{}"
LEFTOVER = (f"could not remove the canary and the baseline in {KEY}: 403 Forbidden on "
            f"DELETE deployments/{NS}/{WORKLOAD}-canary and DELETE deployments/{NS}/{WORKLOAD}-baseline")
RBAC = f"grant delete on deployments in namespace {NS} to the worker's service account (check the worker's RBAC)"
REGRESSION = {"latency_factor": 1.8, "error_factor": 8}


def write_targets(tmp_path: Path, kube: FakeKubeApi) -> Path:
    """us-east-1/prod deploys to the fake API (namespace `shop`, Deployment `checkout`); simulated metrics."""
    deployer = {"kind": "kubernetes", "api_url": kube.url, "namespace": NS, "workload": WORKLOAD,
                "poll_seconds": 0.02, "progress_deadline_seconds": 20}
    doc = {"targets": [{"region": "us-east-1", "environment": "prod", "deployer": deployer,
                        "metrics": {"kind": "simulated"}}]}
    path = tmp_path / "targets.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def request(soak_seconds: int) -> RolloutRequest:
    """One production stage; judged at once; soaked `soak_seconds` with a look every second."""
    return parse_request({
        "service": f"checkout-{uuid.uuid4().hex[:8]}",  # its own service lock; the Deployment is `workload`
        "version": NEW, "artifact": IMAGE.format(NEW), "requested_by": "ci",
        "regions": [{"name": "us-east-1", "traffic_share": 1.0, "environments": ["prod"]}],
        "canary": {"metrics": METRICS, "analysis_minutes": 0, "judge": {"min_samples": 20},
                   "soak_check_minutes": 1 / 60},
        "soak": {"test_hours": 0, "prod_hours": soak_seconds / 3600},
        "rollback_scope": "all",
    })


async def roll_out(env: Any, tmp_path: Path, task_queue: str, kube: FakeKubeApi, soak_seconds: int,
                   effect: dict[str, Any] | None = None) -> tuple[RolloutState, WorkflowExecutionStatus]:
    """Run one rollout with every DELETE refused; return its end state and how its stage workflow closed."""
    fleet = SimulatedFleet(FleetScenario(fresh_draws=False, min_samples=60, effects=[{"version": NEW, **effect}] if effect else []))
    registry = registry_from_targets(load_targets(write_targets(tmp_path, kube)), fleet)
    req = request(soak_seconds)
    kube.fail_next(10_000, 403, method="DELETE")
    async with build_worker(env.client, registry, task_queue=task_queue, reports=NoReports()):
        handle = await env.client.start_workflow(RolloutWorkflow.run, req, id=f"{req.workflow_id}/{uuid.uuid4().hex[:6]}",
                                                 task_queue=task_queue)
        result = await outcome(handle)
        stage = await machinery_client(env.client).get_workflow_handle(f"{handle.id}/{KEY}").describe()
    assert stage.status is not None
    for leftover in (f"{WORKLOAD}-canary", f"{WORKLOAD}-baseline"):  # both were tried, though the first was refused
        assert kube.count("DELETE", f"/deployments/{leftover}") >= 1, leftover
        assert kube.get(NS, leftover) is not None  # ...so both are still there, for a person
    return result, stage.status


@pytest.mark.parametrize("soak_seconds", [0, 2], ids=["no-soak", "soak"])
async def test_a_forbidden_cleanup_after_promotion_keeps_the_new_version_and_says_what_is_left(
        env, tmp_path, task_queue, kube: FakeKubeApi, soak_seconds: int):
    kube.seed_primary(NS, WORKLOAD, IMAGE.format(OLD), replicas=2)
    result, closed = await roll_out(env, tmp_path, task_queue, kube, soak_seconds)

    assert result.status == "succeeded", result.reason
    assert closed == WorkflowExecutionStatus.COMPLETED
    stage = result.stages[0]
    assert (stage.status, stage.version_before, stage.version_now) == ("succeeded", OLD, NEW), stage
    assert kube.image_of(NS, WORKLOAD) == IMAGE.format(NEW)
    # promoted in the promote activity (no soak), or soaked and then cleaned up by the cleanup activity
    assert stage.reason.startswith(("promoted, but " if soak_seconds == 0 else "soaked, but ") + LEFTOVER), stage.reason
    assert_one_line(stage.reason, LEFTOVER, RBAC)
    assert result.region_versions == {KEY: NEW}


@pytest.mark.parametrize("how", ["judge", "soak-alarm"])
async def test_a_forbidden_cleanup_after_a_failure_still_rolls_the_primary_back(
        env, tmp_path, task_queue, kube: FakeKubeApi, how: str):
    original = kube.seed_primary(NS, WORKLOAD, IMAGE.format(OLD), replicas=2)["spec"]["template"]
    if how == "judge":  # the canary regresses: the primary is never touched, the rollback only cleans up
        result, closed = await roll_out(env, tmp_path, task_queue, kube, 0, REGRESSION)
        failure = "canary judged fail"
    else:  # the new version regresses once it is the primary: the rollback must restore the old template
        result, closed = await roll_out(env, tmp_path, task_queue, kube, 2, {**REGRESSION, "only_after_promotion": True})
        failure = "alarm during soak (look 1/2)"
        assert kube.count("PATCH", f"/deployments/{WORKLOAD}") >= 1  # it had been promoted

    assert result.status == "rolled_back", result.reason
    assert closed == WorkflowExecutionStatus.FAILED  # a RolledBack failure, not cancelled, not terminated
    stage = result.stages[0]
    assert (stage.status, stage.version_now) == ("rolled_back", OLD), stage
    primary = kube.get(NS, WORKLOAD)
    assert primary is not None and kube.image_of(NS, WORKLOAD) == IMAGE.format(OLD)
    assert primary["spec"]["template"] == original
    assert stage.reason.startswith(failure), stage.reason
    assert f"; {LEFTOVER}" in stage.reason and "ROLLBACK FAILED" not in stage.reason
    assert_one_line(stage.reason, LEFTOVER, RBAC)
    assert result.reason.startswith(f"{KEY}: {failure}") and "could not be rolled back" not in result.reason
    assert result.region_versions == {KEY: OLD}
