"""Evacuations on real parts: Route 53 through moto in server mode, scaling through the fake Kubernetes API,
health from the simulated fleet, workflows on the Temporal dev server.

A recording proxy in front of moto sees every Route 53 change batch on the wire, so the tests can count
them and read the weights each one set.
"""

from __future__ import annotations

import threading
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import WorkflowFailureError
from temporalio.testing import ActivityEnvironment

from activities.adapters.registry import AdapterRegistry, registry_from_targets
from activities.adapters.simulated import FleetScenario, SimulatedFleet
from activities.adapters.targets import parse_targets
from activities.traffic.messages import SetWeightsInput
from activities.traffic.shift import TrafficActivities
from common.traffic.models import PlanInput
from tests.fakes.kube_api import FakeKubeApi
from tests.integration.conftest import MotoServer
from tests.workflows.evacuation_helpers import evacuation, running_worker, start, wait_for

pytestmark = pytest.mark.integration

REGIONS = ("us-east-1", "eu-west-1", "ap-south-1")
SERVICE = "checkout"
IMAGE = "registry.example.com/checkout:1.0.0"
EVEN = {r: 100 for r in REGIONS}
R53 = "{https://route53.amazonaws.com/doc/2013-04-01/}"


class Route53Recorder:
    """An HTTP proxy to moto that records the weights of every ChangeResourceRecordSets batch it forwards."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.batches: list[dict[str, int]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.command == "POST" and self.path.rstrip("/").endswith("/rrset"):
                    recorder.batches.append(_batch_weights(body))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                resp = httpx.request(self.command, recorder.target + self.path, content=body, headers=headers)
                self.send_response(resp.status_code)
                for k, v in resp.headers.items():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(resp.content)))
                self.end_headers()
                self.wfile.write(resp.content)

            do_GET = do_POST = do_DELETE = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _batch_weights(body: bytes) -> dict[str, int]:
    root = ET.fromstring(body)
    out = {}
    for rrs in root.iter(f"{R53}ResourceRecordSet"):
        sid, weight = rrs.findtext(f"{R53}SetIdentifier"), rrs.findtext(f"{R53}Weight")
        if sid is not None and weight is not None:
            out[sid] = int(weight)
    return out


@dataclass
class Fleet:
    """A Route 53 zone with one weighted record per region, and each region's primary in the fake cluster."""

    moto: MotoServer
    kube: FakeKubeApi
    recorder: Route53Recorder
    zone_id: str
    zone: str
    targets: dict[str, Any] = field(default_factory=dict)
    # The simulated metric source's world (traffic shares, capacity over time); like a real fleet, it outlives workers.
    world: SimulatedFleet = field(default_factory=lambda: SimulatedFleet(FleetScenario(fresh_draws=False, min_samples=60)))

    def registry(self) -> AdapterRegistry:
        """A fresh registry, as a newly started worker process builds it from the targets file."""
        return registry_from_targets(parse_targets(self.targets), self.world)

    def weights(self) -> dict[str, int]:
        """The weights as moto holds them (read directly, not through the recorder)."""
        rrs = self.moto.client("route53").list_resource_record_sets(HostedZoneId=self.zone_id)["ResourceRecordSets"]
        return {r["SetIdentifier"]: int(r["Weight"]) for r in rrs if r["Name"] == f"{SERVICE}.{self.zone}." and "Weight" in r}

    def replicas(self) -> dict[str, int]:
        out = {}
        for r in REGIONS:
            obj = self.kube.get(f"shop-{r}", SERVICE)
            assert obj is not None
            out[r] = obj["spec"]["replicas"]
        return out

    def set_weights(self, weights: dict[str, int]) -> None:
        changes = [{"Action": "UPSERT", "ResourceRecordSet": {
            "Name": f"{SERVICE}.{self.zone}", "Type": "CNAME", "SetIdentifier": r, "Weight": w, "TTL": 2,
            "ResourceRecords": [{"Value": f"lb.{r}.{self.zone}"}]}} for r, w in weights.items()]
        self.moto.client("route53").change_resource_record_sets(HostedZoneId=self.zone_id, ChangeBatch={"Changes": changes})


def fleet_targets(f: Fleet, *, max_replicas: int | None = None, record: str = "{service}") -> dict[str, Any]:
    targets = []
    for r in REGIONS:
        traffic: dict[str, Any] = {"route53": {"zone_id": f.zone_id, "record_name": f"{record}.{f.zone}"}}
        if max_replicas is not None:
            traffic["max_replicas"] = max_replicas
        targets.append({"region": r, "environment": "prod", "traffic": traffic, "deployer": {
            "kind": "kubernetes", "api_url": f.kube.url, "namespace": f"shop-{r}", "poll_seconds": 0.05}})
    return {"aws": {"endpoint_url": f.recorder.url}, "defaults": {"metrics": {"kind": "simulated"}}, "targets": targets}


@pytest.fixture
def fleet(moto_server: MotoServer, aws_credentials: None, kube: FakeKubeApi) -> Iterator[Fleet]:
    r53 = moto_server.client("route53")
    zone = f"{uuid.uuid4().hex[:8]}.example.com"
    zone_id = r53.create_hosted_zone(Name=zone, CallerReference=uuid.uuid4().hex)["HostedZone"]["Id"].split("/")[-1]
    recorder = Route53Recorder(moto_server.endpoint)
    f = Fleet(moto_server, kube, recorder, zone_id, zone)
    f.set_weights(EVEN)
    for r in REGIONS:
        kube.seed_primary(f"shop-{r}", SERVICE, IMAGE, replicas=4)
    f.targets = fleet_targets(f)
    try:
        yield f
    finally:
        recorder.close()


def _svc_input(**kw: Any):
    return evacuation(SERVICE, **kw)


async def test_evacuate_and_restore_read_back_every_step_and_scale_through_kubernetes(env, task_queue, tmp_path: Path, fleet: Fleet):
    seen: dict[int, dict[str, int]] = {}
    async with running_worker(env.client, fleet.registry(), task_queue, tmp_path):
        h = await start(env.client, _svc_input(), task_queue)

        def record_step(state) -> bool:  # read Route 53 itself while each step is in force (TTL 2 s)
            if state.step and state.step not in seen and state.status == "shifting":
                seen[state.step] = fleet.weights()
            return state.status not in ("planning", "pre_warming", "shifting", "paused")

        await wait_for(h, record_step, timeout=90)
        result = await h.result()
        assert result.status == "evacuated", result.reason
        assert seen == {i + 1: w for i, w in enumerate(result.planned)}  # each step, read back from Route 53
        assert fleet.recorder.batches == result.planned  # one change batch per step, nothing else
        assert fleet.weights() == result.weights_after == {"us-east-1": 150, "eu-west-1": 0, "ap-south-1": 150}
        assert fleet.replicas() == {"us-east-1": 8, "eu-west-1": 4, "ap-south-1": 8}  # pre-warmed: ceil(4 x 1.5 x 1.2)
        for r in ("us-east-1", "ap-south-1"):
            assert fleet.kube.get(f"shop-{r}", SERVICE)["status"]["availableReplicas"] == 8
        assert result.record_set == f"Route 53 {SERVICE}.{fleet.zone}. CNAME in zone {fleet.zone_id}"
        assert result.wait_seconds == 2  # the records' TTL

        restored = await (await start(env.client, result.restore_input(requested_by="bob"), task_queue)).result()
    assert restored.status == "restored", restored.reason
    assert fleet.recorder.batches[3:] == restored.planned and restored.planned[-1] == EVEN
    assert fleet.weights() == EVEN and fleet.replicas() == {r: 4 for r in REGIONS}


async def test_a_worker_restart_mid_evacuation_continues_from_the_recorded_step(env, task_queue, tmp_path: Path, fleet: Fleet):
    async with running_worker(env.client, fleet.registry(), task_queue, tmp_path):
        h = await start(env.client, _svc_input(), task_queue)
        at_step_1 = await wait_for(h, lambda s: s.step == 1 and s.status == "shifting", timeout=60)
    # The first worker is gone while step 1's TTL runs; a new worker (new registry, as a new process) takes over.
    assert fleet.recorder.batches == [at_step_1.planned[0]]
    async with running_worker(env.client, fleet.registry(), task_queue, tmp_path):
        result = await h.result()
    assert result.status == "evacuated", result.reason
    assert fleet.recorder.batches == result.planned  # 3 change batches: no step was applied twice
    assert [s.changed for s in result.steps] == [True, True, True]
    assert fleet.weights() == result.planned[-1]


async def test_a_retried_step_is_a_no_op(fleet: Fleet):
    """The activity after a crash between Route 53's change and its result: already there, nothing is sent."""
    acts = TrafficActivities(fleet.registry())
    step = {"us-east-1": 116, "eu-west-1": 67, "ap-south-1": 117}
    inp = SetWeightsInput(service=SERVICE, region="eu-west-1", weights=step, expect=EVEN)
    first = await ActivityEnvironment().run(acts.set_weights, inp)
    second = await ActivityEnvironment().run(acts.set_weights, inp)
    assert (first.changed, second.changed) == (True, False) and first.weights == second.weights == step
    assert fleet.recorder.batches == [step]


async def test_someone_else_moving_the_weights_stops_the_step(fleet: Fleet):
    from temporalio.exceptions import ApplicationError

    acts = TrafficActivities(fleet.registry())
    fleet.set_weights({"us-east-1": 90})  # another operator
    with pytest.raises(ApplicationError) as err:
        await ActivityEnvironment().run(acts.set_weights, SetWeightsInput(
            service=SERVICE, region="eu-west-1", weights={"eu-west-1": 0}, expect=EVEN))
    assert err.value.type == "TrafficConflict" and err.value.non_retryable and "changed by someone else" in str(err.value)
    assert fleet.recorder.batches == []


@pytest.mark.parametrize("case", ["unknown region", "last region", "missing record", "receiver cannot scale"])
async def test_bad_requests_are_refused_before_anything_changes(env, task_queue, tmp_path: Path, fleet: Fleet, case: str):
    inp, words = _svc_input(), ""
    if case == "unknown region":
        inp, words = _svc_input(region="mars-1"), "region: mars-1 has no traffic target"
    elif case == "last region":
        fleet.set_weights({"us-east-1": 0, "ap-south-1": 0})
        words = "eu-west-1 is the last region serving checkout"
    elif case == "missing record":
        fleet.targets = fleet_targets(fleet, record="nope")
        words = f"record: no weighted CNAME records named nope.{fleet.zone}."
    else:
        fleet.targets = fleet_targets(fleet, max_replicas=7)
        words = "us-east-1 needs 8 replicas (now 4)"
    weights, replicas, writes = fleet.weights(), fleet.replicas(), fleet.kube.count("PATCH")
    async with running_worker(env.client, fleet.registry(), task_queue, tmp_path):
        h = await start(env.client, inp, task_queue)
        with pytest.raises(WorkflowFailureError) as err:
            await h.result()
    cause = err.value.cause
    assert cause.type == "InvalidRequest" and words in cause.message and "nothing was changed" in cause.message, cause.message
    assert fleet.recorder.batches == [] and fleet.weights() == weights
    assert fleet.replicas() == replicas and fleet.kube.count("PATCH") == writes


async def test_steps_that_do_not_decrease_are_refused_by_the_plan_too(fleet: Fleet):
    """The CLI and the input model refuse them first; the plan activity checks again (e.g. for other callers)."""
    from temporalio.exceptions import ApplicationError

    acts = TrafficActivities(fleet.registry())
    with pytest.raises(ApplicationError) as err:
        await ActivityEnvironment().run(acts.plan_traffic, PlanInput(service=SERVICE, region="eu-west-1", steps=[30, 30]))
    assert err.value.type == "InvalidRequest" and "steps: levels must strictly decrease" in err.value.message
    assert fleet.recorder.batches == [] and fleet.kube.count("PATCH") == 0
