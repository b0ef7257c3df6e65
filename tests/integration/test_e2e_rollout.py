"""End to end on the real Temporal dev server: the targets file wires the fake kube API, Prometheus and moto.

us-east-1 (test, prod) deploys to the fake Kubernetes API and is judged from Prometheus; eu-west-1/prod
deploys to it too and is judged from CloudWatch (moto). The dev server skips time, so each 30-minute
canary window is virtual; the synthetic metrics extend into the future to cover it.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import Client, WorkflowHandle

from activities.adapters.registry import registry_from_targets
from activities.adapters.targets import load_targets
from bifrost_cli.ops import outcome
from tests.fakes.kube_api import FakeKubeApi
from tests.integration.conftest import (
    BASELINE,
    GOOD,
    PROD_ONLY_BAD,
    SERVICE,
    Front,
    MotoServer,
    PrometheusServer,
    Receiver,
)
from tests.integration.promdata import QUERIES
from worker.build import build_worker
from worker.endpoints import machinery_client
from workflows.request import RolloutRequest, parse_request
from workflows.rollout.workflow import RolloutWorkflow

pytestmark = pytest.mark.integration

IMAGE = "registry.example.com/checkout:{}"
NAMESPACES = {"us-east-1/test": "checkout-use1-test", "us-east-1/prod": "checkout-use1", "eu-west-1/prod": "checkout-euw1"}
CW_NAMESPACE = f"Bifrost/E2E/{uuid.uuid4().hex[:8]}"
CW_DIMENSIONS = {"Service": "{service}", "Version": "{version}", "Role": "{role}", "Environment": "{environment}"}


@dataclass
class Secrets:
    kube_token: str
    prom_token: str
    webhook_url: str

    def values(self) -> list[str]:
        return [self.kube_token, self.prom_token, self.webhook_url]


@pytest.fixture(scope="module")
def cloudwatch_history(moto_server: MotoServer) -> None:
    """Per-minute latency and error rate for eu-west-1/prod from 10 minutes ago to 6 hours ahead."""
    cw = moto_server.client("cloudwatch", "eu-west-1")
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=10)
    rng = random.Random(11)
    for role, version in (("baseline", BASELINE), ("canary", GOOD)):
        dims = [{"Name": "Service", "Value": SERVICE}, {"Name": "Version", "Value": version},
                {"Name": "Role", "Value": role}, {"Name": "Environment", "Value": "prod"}]
        data: list[dict[str, Any]] = []
        for i in range(6 * 60 + 10):
            ts = start + timedelta(minutes=i)
            data.append({"MetricName": "LatencyP99", "Dimensions": dims, "Timestamp": ts, "Value": rng.gauss(250, 20)})
            data.append({"MetricName": "ErrorRate", "Dimensions": dims, "Timestamp": ts, "Value": rng.gauss(0.01, 0.001)})
        for i in range(0, len(data), 500):
            cw.put_metric_data(Namespace=CW_NAMESPACE, MetricData=data[i:i + 500])


@pytest.fixture
def cluster() -> Any:
    """The fake kube API requiring a bearer token, with the primary of every stage on 1.0.0."""
    token = f"kube-token-{uuid.uuid4().hex}"
    with FakeKubeApi(tick_seconds=0.02, token=token) as kube:
        for ns in NAMESPACES.values():
            kube.seed_primary(ns, SERVICE, IMAGE.format(BASELINE), replicas=2)
        yield kube, token


def write_targets(tmp_path: Path, kube: FakeKubeApi, prom_url: str, moto: MotoServer) -> Path:
    kube_common = {"kind": "kubernetes", "api_url": kube.url, "token_env": "E2E_KUBE_TOKEN", "poll_seconds": 0.05,
                   "progress_deadline_seconds": 20}
    prom = {"kind": "prometheus", "url": prom_url, "token_env": "E2E_PROM_TOKEN", "queries": QUERIES}
    doc = {
        "aws": {"endpoint_url": moto.endpoint, "access_key_id_env": "E2E_AWS_KEY", "secret_access_key_env": "E2E_AWS_SECRET"},
        "targets": [
            {"region": "us-east-1", "environment": "test", "deployer": {**kube_common, "namespace": NAMESPACES["us-east-1/test"]},
             "metrics": prom},
            {"region": "us-east-1", "environment": "prod", "deployer": {**kube_common, "namespace": NAMESPACES["us-east-1/prod"]},
             "metrics": prom},
            {"region": "eu-west-1", "environment": "prod", "deployer": {**kube_common, "namespace": NAMESPACES["eu-west-1/prod"]},
             "metrics": {"kind": "cloudwatch", "metrics": {
                 "latency_p99": {"namespace": CW_NAMESPACE, "metric_name": "LatencyP99", "dimensions": CW_DIMENSIONS},
                 "error_rate": {"namespace": CW_NAMESPACE, "metric_name": "ErrorRate", "dimensions": CW_DIMENSIONS}}}},
        ],
        "notifications": {"webhooks": [{"name": "releases", "url_env": "E2E_WEBHOOK_URL"}]},
    }
    path = tmp_path / "targets.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def request(version: str, requested_by: str) -> RolloutRequest:
    return parse_request({
        "service": SERVICE, "version": version, "artifact": IMAGE.format(version), "requested_by": requested_by,
        "regions": [{"name": "us-east-1", "traffic_share": 0.6},
                    {"name": "eu-west-1", "traffic_share": 0.4, "environments": ["prod"]}],
        "canary": {"metrics": [
            {"name": "latency_p99", "kind": "latency", "direction": "increase", "allowed_increase": 1.2},
            {"name": "error_rate", "kind": "error_rate", "direction": "increase", "critical": True, "allowed_increase": 1.5},
        ], "analysis_minutes": 30, "interval_seconds": 60, "judge": {"min_samples": 20}},
        "soak": {"test_hours": 0, "prod_hours": 0},
        "blast_radius": {"canary_region": "us-east-1"},
        "rollback_scope": "all",
    })


async def histories_bytes(client: Client, parent: WorkflowHandle, task_queue: str) -> tuple[bytes, list[str]]:
    """Every event of every workflow that ran on the task queue (in the namespace people open and its machinery
    namespace), as raw protobuf plus JSON."""
    where = {parent.id: client}
    for c in (client, machinery_client(client)):
        async for wf in c.list_workflows(f"TaskQueue = '{task_queue}'"):
            where[wf.id] = c
    blobs: list[bytes] = []
    for wid in sorted(where):
        history = await where[wid].get_workflow_handle(wid).fetch_history()
        blobs.extend(e.SerializeToString() for e in history.events)
        blobs.append(history.to_json().encode())
    ids = set(where)
    return b"\n".join(blobs), sorted(ids)


# One task queue for the module: the service lock workflow of `checkout` outlives a rollout by minutes and
# must keep a worker when the next test rolls out the same service.
TASK_QUEUE = f"e2e-{uuid.uuid4().hex}"


async def run_rollout(env: Any, tmp_path: Path, kube: FakeKubeApi, prom_url: str, moto: MotoServer,
                      version: str) -> tuple[Any, bytes, list[str], str]:
    registry = registry_from_targets(load_targets(write_targets(tmp_path, kube, prom_url, moto)))
    task_queue = TASK_QUEUE
    requested_by = f"e2e-tester-{uuid.uuid4().hex[:8]}"  # appears only inside payloads: the scan's positive control
    req = request(version, requested_by)
    async with build_worker(env.client, registry, task_queue=task_queue, reports_dir=tmp_path / "reports"):
        handle = await env.client.start_workflow(
            RolloutWorkflow.run, req, id=f"{req.workflow_id}/{uuid.uuid4().hex[:6]}", task_queue=task_queue)
        result = await outcome(handle)
        raw, ids = await histories_bytes(env.client, handle, task_queue)
    return result, raw, ids, requested_by


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch, cluster: Any, webhook_receiver: Receiver) -> Secrets:
    s = Secrets(kube_token=cluster[1], prom_token=f"prom-token-{uuid.uuid4().hex}",
                webhook_url=f"{webhook_receiver.url}/services/T0/B0/{uuid.uuid4().hex}")
    monkeypatch.setenv("E2E_KUBE_TOKEN", s.kube_token)
    monkeypatch.setenv("E2E_PROM_TOKEN", s.prom_token)
    monkeypatch.setenv("E2E_WEBHOOK_URL", s.webhook_url)
    monkeypatch.setenv("E2E_AWS_KEY", "testing")
    monkeypatch.setenv("E2E_AWS_SECRET", "testing")
    return s


def assert_no_secrets(raw: bytes, secrets: Secrets, requested_by: str) -> None:
    assert requested_by.encode() in raw  # the scan sees payload contents, so absence below means something
    for value in secrets.values():
        assert value.encode() not in raw, "a secret value reached a workflow history"


async def test_a_good_version_rolls_out_everywhere(ts_env, tmp_path, cluster, prometheus: PrometheusServer,
                                                   moto_server: MotoServer, cloudwatch_history, secrets: Secrets):
    kube, _ = cluster
    front = Front(prometheus.url)  # records the headers Prometheus receives
    try:
        result, raw, ids, requested_by = await run_rollout(ts_env, tmp_path, kube, front.url, moto_server, GOOD)
    finally:
        front.close()
    assert result.status == "succeeded", result.reason
    assert result.region_versions == {"us-east-1/test": GOOD, "us-east-1/prod": GOOD, "eu-west-1/prod": GOOD}
    for ns in NAMESPACES.values():
        assert kube.image_of(ns, SERVICE) == IMAGE.format(GOOD)
        assert kube.get(ns, f"{SERVICE}-canary") is None and kube.get(ns, f"{SERVICE}-baseline") is None
    assert front.seen and all(h.get("Authorization") == f"Bearer {secrets.prom_token}" for h in front.seen)
    assert all(r.authorization == f"Bearer {secrets.kube_token}" for r in kube.requests)
    assert len(ids) >= 4  # the rollout and its three stage children at least
    assert_no_secrets(raw, secrets, requested_by)


async def test_a_version_regressing_in_prod_rolls_back_and_the_cluster_ends_on_the_old_image(
        ts_env, tmp_path, cluster, prometheus: PrometheusServer, moto_server: MotoServer, secrets: Secrets):
    kube, _ = cluster
    original = {ns: kube.get(ns, SERVICE)["spec"]["template"] for ns in NAMESPACES.values()}
    result, raw, _, requested_by = await run_rollout(ts_env, tmp_path, kube, prometheus.url, moto_server, PROD_ONLY_BAD)

    stages = {s.key: s for s in result.stages}
    assert result.status == "rolled_back", result.reason
    assert stages["us-east-1/prod"].verdict == "fail"
    assert kube.count("PATCH", f"/namespaces/{NAMESPACES['us-east-1/test']}/deployments/{SERVICE}") == 1  # it was promoted
    for ns in NAMESPACES.values():  # ...and put back: every primary runs its original pod template again
        primary = kube.get(ns, SERVICE)
        assert kube.image_of(ns, SERVICE) == IMAGE.format(BASELINE)
        assert primary["spec"]["template"] == original[ns]
        assert kube.get(ns, f"{SERVICE}-canary") is None and kube.get(ns, f"{SERVICE}-baseline") is None
    assert all(v == BASELINE for v in result.region_versions.values()), result.region_versions
    assert_no_secrets(raw, secrets, requested_by)
