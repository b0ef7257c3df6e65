"""Route 53 weighted records through moto in server mode: read, set, refuse inconsistent weights, move in steps."""

from __future__ import annotations

import uuid

import pytest

from activities.adapters.base import TrafficError
from activities.adapters.route53 import Route53Traffic, WeightedRecord, plan_steps, shares
from tests.integration.conftest import MotoServer

pytestmark = pytest.mark.integration

REGIONS = {"us-east-1": 100, "eu-west-1": 100, "ap-south-1": 0}


@pytest.fixture
def record(moto_server: MotoServer, aws_credentials: None) -> WeightedRecord:
    """A fresh zone with one weighted CNAME per region for api.<zone>, plus an unrelated record after it."""
    r53 = moto_server.client("route53")
    zone = f"{uuid.uuid4().hex[:8]}.example.com"
    zone_id = r53.create_hosted_zone(Name=zone, CallerReference=uuid.uuid4().hex)["HostedZone"]["Id"].split("/")[-1]
    changes = [
        {"Action": "CREATE", "ResourceRecordSet": {
            "Name": f"api.{zone}", "Type": "CNAME", "SetIdentifier": region, "Weight": weight, "TTL": 60,
            "ResourceRecords": [{"Value": f"lb.{region}.{zone}"}]}}
        for region, weight in REGIONS.items()
    ]
    changes.append({"Action": "CREATE", "ResourceRecordSet": {
        "Name": f"web.{zone}", "Type": "CNAME", "TTL": 60, "ResourceRecords": [{"Value": f"api.{zone}"}]}})
    r53.change_resource_record_sets(HostedZoneId=zone_id, ChangeBatch={"Changes": changes})
    return WeightedRecord(zone_id=zone_id, record_name=f"api.{zone}", record_type="CNAME")


def traffic(moto: MotoServer, record: WeightedRecord) -> Route53Traffic:
    return Route53Traffic(record, lambda: moto.client("route53"), poll_seconds=0.01, sync_timeout_seconds=5)


async def test_reads_the_weights_of_every_region(moto_server, record):
    t = traffic(moto_server, record)
    assert await t.weights() == REGIONS
    assert shares(REGIONS) == {"us-east-1": 0.5, "eu-west-1": 0.5, "ap-south-1": 0.0}


async def test_sets_weights_atomically_and_keeps_the_rest_of_each_record(moto_server, record):
    t = traffic(moto_server, record)
    assert await t.set_weights({"us-east-1": 50, "ap-south-1": 50}, expect=REGIONS) == \
        {"us-east-1": 50, "eu-west-1": 100, "ap-south-1": 50}
    rrs = moto_server.client("route53").list_resource_record_sets(HostedZoneId=record.zone_id)["ResourceRecordSets"]
    ap = next(r for r in rrs if r.get("SetIdentifier") == "ap-south-1")
    assert ap["Weight"] == 50 and ap["TTL"] == 60 and ap["ResourceRecords"] == [{"Value": f"lb.ap-south-1.{record.record_name[4:]}"}]


@pytest.mark.parametrize("wanted, words", [
    ({"mars-1": 10}, "unknown set identifiers"),
    ({"us-east-1": 256}, "integer from 0 to 255"),
    ({"us-east-1": -1}, "integer from 0 to 255"),
    ({"us-east-1": 0, "eu-west-1": 0}, "all weights would be 0"),
])
async def test_inconsistent_weights_are_refused_without_any_change(moto_server, record, wanted, words):
    t = traffic(moto_server, record)
    with pytest.raises(TrafficError) as err:
        await t.set_weights(wanted)
    assert not err.value.retryable and words in str(err.value)
    assert await t.weights() == REGIONS


async def test_a_concurrent_change_is_detected(moto_server, record):
    t = traffic(moto_server, record)
    await traffic(moto_server, record).set_weights({"eu-west-1": 80})  # someone else moved traffic
    with pytest.raises(TrafficError) as err:
        await t.set_weights({"us-east-1": 0}, expect=REGIONS)
    assert err.value.retryable and "changed under us" in str(err.value)
    assert await t.weights() == {"us-east-1": 100, "eu-west-1": 80, "ap-south-1": 0}


async def test_moves_traffic_in_bounded_steps(moto_server, record):
    t = traffic(moto_server, record)
    seen: list[dict[str, int]] = []

    async def check(now: dict[str, int]) -> None:
        seen.append(now)
        assert await t.weights() == now  # every intermediate state is really in Route 53

    applied = await t.move({"us-east-1": 0, "ap-south-1": 100}, max_step=30, between_steps=check)
    assert applied[-1] == {"us-east-1": 0, "eu-west-1": 100, "ap-south-1": 100}
    assert len(applied) == 4 and seen == applied[:-1]
    prev = REGIONS
    for step in applied:
        assert all(abs(step[k] - prev[k]) <= 30 for k in step) and sum(step.values()) > 0
        prev = step
    assert await t.weights() == applied[-1]


async def test_a_failing_check_between_steps_stops_the_move(moto_server, record):
    t = traffic(moto_server, record)

    async def unhealthy(now: dict[str, int]) -> None:
        raise RuntimeError("ap-south-1 error rate above 5%")

    with pytest.raises(RuntimeError):
        await t.move({"us-east-1": 0, "ap-south-1": 100}, max_step=50, between_steps=unhealthy)
    assert await t.weights() == {"us-east-1": 50, "eu-west-1": 100, "ap-south-1": 50}  # stopped after one step


async def test_unknown_record_and_zone_are_permanent_errors(moto_server, record):
    with pytest.raises(TrafficError) as err:
        await traffic(moto_server, WeightedRecord(record.zone_id, "nope." + record.record_name[4:])).weights()
    assert not err.value.retryable and "no weighted CNAME records" in str(err.value)
    with pytest.raises(TrafficError) as err:
        await traffic(moto_server, WeightedRecord("Z0000000NOPE", record.record_name)).weights()
    assert not err.value.retryable and "NoSuchHostedZone" in str(err.value)


def test_plan_steps_never_exceeds_the_step_and_ends_on_target():
    steps = plan_steps({"a": 255, "b": 0}, {"a": 0, "b": 255}, 100)
    assert steps[-1] == {"a": 0, "b": 255} and len(steps) == 3
    assert plan_steps({"a": 10}, {"a": 10}, 5) == [{"a": 10}]
    with pytest.raises(TrafficError):
        plan_steps({"a": 1}, {"a": 2}, 0)
