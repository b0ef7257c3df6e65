"""Route 53 (moto in server mode) behind a fault-injecting proxy: 500s, throttling, answers slower than the client's
timeout, and outages, during the steps of an evacuation. Each step must still end with the record set reading
back as planned, each step's batch must land once and in order, and the end state comes from the record set.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from botocore.config import Config
from temporalio.client import WorkflowFailureError

from activities.adapters.base import TrafficError
from activities.adapters.route53 import Route53Traffic, WeightedRecord
from tests.fakes.kube_api import FakeKubeApi
from tests.integration.conftest import MotoServer
from tests.integration.route53_faults import Fault, FaultyRoute53
from tests.integration.test_evacuation_aws import EVEN, IMAGE, REGIONS, SERVICE, Fleet, fleet_targets
from tests.workflows.evacuation_helpers import evacuation, running_worker, start, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def faulty(moto_server: MotoServer, aws_credentials: None, kube: FakeKubeApi) -> Iterator[tuple[Fleet, FaultyRoute53]]:
    """The evacuation fleet of test_evacuation_aws, with the fault proxy between the worker and moto."""
    r53 = moto_server.client("route53")
    zone = f"{uuid.uuid4().hex[:8]}.example.com"
    zone_id = r53.create_hosted_zone(Name=zone, CallerReference=uuid.uuid4().hex)["HostedZone"]["Id"].split("/")[-1]
    holder: list[Fleet] = []
    proxy = FaultyRoute53(moto_server.endpoint, lambda: holder[0].weights())
    f = Fleet(moto_server, kube, proxy, zone_id, zone)  # type: ignore[arg-type]
    holder.append(f)
    f.set_weights(EVEN)
    for r in REGIONS:
        kube.seed_primary(f"shop-{r}", SERVICE, IMAGE, replicas=4)
    f.targets = fleet_targets(f)
    # botocore tries once and gives up after 1 s: the retries under test are Bifrost's own
    f.targets["aws"].update(timeout_seconds=1, max_attempts=1)
    try:
        yield f, proxy
    finally:
        proxy.close()


def _router(f: Fleet, proxy: FaultyRoute53) -> Route53Traffic:
    def client():
        return boto3.client("route53", region_name="us-east-1", endpoint_url=proxy.url,
                            config=Config(connect_timeout=1, read_timeout=1, retries={"mode": "standard", "max_attempts": 1}))

    record = WeightedRecord(f.zone_id, f"{SERVICE}.{f.zone}")
    return Route53Traffic(record, client, poll_seconds=0.01, sync_timeout_seconds=5, backoff_seconds=0.2)


STEP = {"us-east-1": 116, "eu-west-1": 67, "ap-south-1": 117}


@pytest.mark.parametrize("fault", [
    Fault("500"), Fault("500", count=3), Fault("throttle", count=2), Fault("down", count=2),
    Fault("down", count=4, only_changes=False), Fault("slow", delay=2.0),
], ids=["one 500", "three 500s", "throttled", "no answer", "outage", "slow answer"])
async def test_a_step_survives_a_retryable_fault_and_lands_once(faulty, fault: Fault):
    f, proxy = faulty
    proxy.inject(fault)
    assert await _router(f, proxy).set_weights(STEP, expect=EVEN) == STEP
    assert f.weights() == STEP and proxy.injected == [fault.kind] * len(proxy.injected) and proxy.injected
    assert proxy.applied == [STEP]  # a resent copy carries a DELETE of the weights before: Route 53 refuses it
    assert all(b.expects == {k: EVEN[k] for k in STEP} for b in proxy.batches)  # every batch is guarded


async def test_an_outage_longer_than_the_retries_is_a_retryable_error(faulty):
    f, proxy = faulty
    proxy.inject(Fault("down", count=100, only_changes=False))
    with pytest.raises(TrafficError) as err:
        await _router(f, proxy).set_weights(STEP, expect=EVEN)
    assert err.value.retryable and "cannot reach Route 53" in str(err.value) and "6 tries" in str(err.value)
    assert f.weights() == EVEN


async def test_an_evacuation_under_faults_ends_evacuated_with_one_batch_per_step(env, task_queue, tmp_path: Path, faulty):
    f, proxy = faulty
    # step 1: one 500 and an answer slower than the client's timeout; step 2: throttled; Route 53 briefly down
    proxy.inject(Fault("500"), Fault("slow", delay=2.0), Fault("throttle"), Fault("down", count=2, only_changes=False))
    async with running_worker(env.client, f.registry(), task_queue, tmp_path):
        result = await (await start(env.client, evacuation(SERVICE), task_queue)).result()
    assert result.status == "evacuated", result.reason
    assert proxy.applied == result.planned  # each step landed once, in order; no late copy could land
    assert f.weights() == result.weights_after == result.planned[-1]
    assert set(proxy.injected) == {"500", "slow", "throttle", "down"}


async def test_the_end_state_comes_from_the_record_set_not_the_plan(env, task_queue, tmp_path: Path, faulty):
    """A change landing after the last step (as a late batch would without the guard) is reported, not hidden."""
    f, proxy = faulty
    async with running_worker(env.client, f.registry(), task_queue, tmp_path):
        h = await start(env.client, evacuation(SERVICE, extra_wait_seconds=3), task_queue)
        await wait_for(h, lambda s: s.step == 3, timeout=120)  # the last step is read back; its wait runs
        f.set_weights({"eu-west-1": 30})
        with pytest.raises(WorkflowFailureError) as err:
            await h.result()
    message = err.value.cause.message
    assert "'eu-west-1': 30" in message and "did not end as planned" in message, message
