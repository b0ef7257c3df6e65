"""The traffic section of the targets file: validation names the field, and the registry builds one router per set."""

from __future__ import annotations

import statistics
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from activities.adapters.registry import registry_from_targets
from activities.adapters.targets import TargetsError, parse_targets
from canary.config import MetricSpec
from common.types import MetricWindow, StageRef

PROM = {"kind": "prometheus", "url": "http://prom:9090",
        "queries": {"latency_p99": "q{version}", "error_rate": "e{version}"}}


def target(region: str, traffic: dict[str, Any], metrics: dict[str, Any] | None = None) -> dict[str, Any]:
    t: dict[str, Any] = {"region": region, "environment": "prod", "traffic": traffic}
    if metrics is not None:
        t["metrics"] = metrics
    return t


def problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(TargetsError) as err:
        parse_targets(data)
    return err.value.problems


R53 = {"zone_id": "Z1", "record_name": "{service}.example.com"}


def test_route53_with_service_placeholder_ttl_bounds_and_health():
    f = parse_targets({"targets": [
        target("us-east-1", {"route53": {**R53, "ttl_seconds": 30}, "max_replicas": 40,
                             "health": ["latency_p99", {"name": "error_rate", "kind": "error_rate", "critical": True}]},
               metrics=PROM),
        target("eu-west-1", {"route53": {**R53, "set_identifier": "euw1"}}, metrics=PROM),
    ]})
    reg = registry_from_targets(f)
    use1, euw1 = reg.traffic_target("us-east-1", "prod"), reg.traffic_target("eu-west-1", "prod")
    assert use1 is not None and euw1 is not None
    assert use1.router_for("payments") is euw1.router_for("payments")  # one record set per service
    assert use1.router_for("payments") is not use1.router_for("orders")
    assert use1.router_for("payments").name == "Route 53 payments.example.com. CNAME in zone Z1"
    assert (use1.min_wait_seconds, use1.max_replicas, euw1.set_identifier) == (30, 40, "euw1")
    assert [(m.name, m.kind, m.critical) for m in use1.health] == [("latency_p99", "latency", False), ("error_rate", "error_rate", True)]
    assert euw1.max_replicas is None and [m.name for m in euw1.health] == ["latency_p99", "error_rate"]  # the defaults
    from common.types import StageRef

    legacy = reg.traffic_for(StageRef(service="payments", region="eu-west-1", environment="prod"))
    assert legacy is not None and legacy.router is use1.router_for("payments") and legacy.set_identifier == "euw1"


@pytest.mark.parametrize("data, expected", [
    ({"targets": [target("us-east-1", {"route53": {**R53, "record_name": "{svc}.example.com"}}, metrics=PROM)]},
     "targets.0.traffic.route53.record_name: unknown placeholder(s) {svc}; only {service} is allowed"),
    ({"targets": [target("us-east-1", {}, metrics=PROM)]},
     "targets.0.traffic: give exactly one of route53 (a Route 53 weighted record) or simulated (in-memory)"),
    ({"targets": [target("us-east-1", {"route53": R53, "max_replicas": 0}, metrics=PROM)]},
     "targets.0.traffic.max_replicas: Input should be greater than or equal to 1"),
    ({"targets": [target("us-east-1", {"route53": {**R53, "ttl_seconds": -5}}, metrics=PROM)]},
     "targets.0.traffic.route53.ttl_seconds: Input should be greater than or equal to 0"),
])
def test_field_errors_name_the_field(data, expected):
    assert expected in problems(data)


def test_health_metrics_must_exist_in_the_metric_source():
    found = problems({"targets": [target("us-east-1", {"route53": R53, "health": ["latency_p99", "saturation"]}, metrics=PROM)]})
    assert found == ["targets.0.traffic.health: saturation not in the metric source of us-east-1/prod (it has: "
                     "error_rate, latency_p99); add them there or list health metrics it has (see docs/traffic.md#health-checks)"]
    no_source = problems({"targets": [target("us-east-1", {"route53": R53})]})
    assert "targets.0.traffic.health: us-east-1/prod has no metric source" in no_source[0]
    ok = parse_targets({"defaults": {"metrics": {"kind": "simulated"}},
                        "targets": [target("us-east-1", {"simulated": {}, "health": ["anything_goes"]})]})
    assert ok.targets[0].traffic is not None


def test_a_set_identifier_may_appear_once_per_record_set():
    found = problems({"targets": [target("us-east-1", {"route53": {**R53, "set_identifier": "x"}}, metrics=PROM),
                                  target("eu-west-1", {"route53": {**R53, "set_identifier": "x"}}, metrics=PROM)]})
    assert "targets.1.traffic: set identifier 'x' of eu-west-1/prod is already used by us-east-1/prod" in found[0]


async def test_simulated_records_form_one_set_per_service_and_start_at_their_weights():
    f = parse_targets({"defaults": {"deployer": {"kind": "simulated", "replicas": 6}, "metrics": {"kind": "simulated"}},
                       "targets": [target("us-east-1", {"simulated": {"weight": 200, "ttl_seconds": 5}}),
                                   target("eu-west-1", {"simulated": {"weight": 50, "ttl_seconds": 30}})]})
    reg = registry_from_targets(f)
    router = reg.traffic_target("us-east-1", "prod").router_for("payments")  # type: ignore[union-attr]
    assert await router.weights() == {"us-east-1": 200, "eu-west-1": 50} and await router.ttl_seconds() == 30
    from common.types import StageRef

    assert await reg.deployer(StageRef(service="payments", region="us-east-1", environment="prod")).replicas(
        StageRef(service="payments", region="us-east-1", environment="prod")) == 6


async def test_the_simulated_fleet_slows_down_and_sheds_when_a_region_is_overloaded():
    """Three regions at 60% load; moving one region's share onto the others overloads them unless they scale."""
    from datetime import UTC, datetime, timedelta

    from activities.adapters.simulated import FleetScenario, SimulatedFleet
    from activities.adapters.simulated_traffic import overload
    from canary.config import MetricSpec
    from common.types import MetricWindow, StageRef

    assert overload(0.6).latency_factor == 1.0 and overload(0.6).error_rate == 0.0
    assert overload(1.0).latency_factor == 3.0 and overload(1.25).error_rate == pytest.approx(0.2)
    clock = [datetime(2026, 1, 1, tzinfo=UTC)]
    fleet = SimulatedFleet(FleetScenario(fresh_draws=False, min_samples=60))
    fleet.load.clock = lambda: clock[0]
    use1 = StageRef(service="pay", region="us-east-1", environment="prod")
    fleet.load.observe_weights("pay", "prod", {"us-east-1": 100, "eu-west-1": 100, "ap-south-1": 100})

    def window(minutes: int) -> MetricWindow:
        end = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=minutes)
        return MetricWindow(start=end - timedelta(minutes=1), end=end, interval_seconds=1)

    clock[0] += timedelta(minutes=5)
    fleet.load.observe_weights("pay", "prod", {"us-east-1": 150, "eu-west-1": 0, "ap-south-1": 150})  # 90% load
    assert fleet.load.effect(use1, window(4)).utilization == pytest.approx(0.6)  # the past keeps its own load
    assert fleet.load.effect(use1, window(6)).utilization == pytest.approx(0.9)
    latency = MetricSpec(name="latency_p99", kind="latency")
    before = await fleet.fetch(use1, latency, window(4), ("primary", None), ("primary", "1.0.0"))
    after = await fleet.fetch(use1, latency, window(6), ("primary", None), ("primary", "1.0.0"))
    assert (len(before.canary), len(after.canary)) == (60, 60)  # one sample an interval: traffic changes what each counts
    errors = MetricSpec(name="error_rate", kind="error_rate")
    loaded = await fleet.fetch(use1, errors, window(6), ("primary", None), ("primary", "1.0.0"))
    assert _requests_per_sample(loaded.canary) == 3000  # half the traffic instead of a third: 1.5x the requests
    mean = statistics.fmean
    assert mean(after.canary) / mean(before.canary) == pytest.approx(overload(0.9).latency_factor, rel=0.05)
    clock[0] += timedelta(minutes=5)
    await fleet.scale(use1, 8)  # capacity doubles: 45% load
    assert fleet.load.effect(use1, window(11)).latency_factor == 1.0 and await fleet.replicas(use1) == 8


def _requests_per_sample(rates: list[float]) -> int:
    """The smallest request count (up to 10,000) of which every error-rate sample is a whole fraction."""
    return next(n for n in range(1, 10_001) if all(abs(r * n - round(r * n)) < 1e-6 for r in rates))


def _stage(region: str, service: str = "pay") -> StageRef:
    return StageRef(service=service, region=region, environment="prod")


def _window(end: datetime) -> MetricWindow:
    return MetricWindow(start=end - timedelta(minutes=1), end=end, interval_seconds=1)


async def test_the_fleets_samples_follow_the_weights_set_through_the_router_alone():
    """Issue #19 item 5: weights moved through the adapter interface (as the traffic activities do, knowing nothing
    of the fleet) reach the simulated metrics: a drained region yields no samples, its receivers more."""
    from activities.adapters.simulated import FleetScenario, SimulatedFleet

    clock = [datetime(2026, 1, 1, tzinfo=UTC)]
    fleet = SimulatedFleet(FleetScenario(fresh_draws=False, min_samples=60))
    fleet.load.clock = lambda: clock[0]
    reg = registry_from_targets(parse_targets({
        "defaults": {"deployer": {"kind": "simulated"}, "metrics": {"kind": "simulated"}},
        "targets": [target(r, {"simulated": {"weight": 100}}) for r in ("us-east-1", "eu-west-1", "ap-south-1")]}), fleet)
    router = reg.traffic_target("eu-west-1", "prod").router_for("pay")  # type: ignore[union-attr]
    latency = MetricSpec(name="latency_p99", kind="latency")
    errors = MetricSpec(name="error_rate", kind="error_rate")

    async def samples(region: str, metric: MetricSpec = latency) -> int:
        got = await reg.metrics(_stage(region)).fetch(_stage(region), metric, _window(clock[0]), ("baseline", "0.9.0"),
                                                      ("canary", "1.0.0"))
        assert len(got.baseline) == len(got.canary)  # both sides see the region's traffic
        return len(got.canary)

    assert [await samples(r) for r in ("us-east-1", "eu-west-1")] == [60, 60]  # nothing seen yet: an even split
    await router.weights()  # a read is seen too: an even split
    clock[0] += timedelta(minutes=5)
    await router.set_weights({"eu-west-1": 0}, expect={"us-east-1": 100, "eu-west-1": 100, "ap-south-1": 100})
    clock[0] += timedelta(minutes=5)
    assert await samples("eu-west-1") == 0 and await samples("eu-west-1", errors) == 0  # drained: no samples at all
    assert await samples("us-east-1") == 60 and await samples("ap-south-1", errors) == 60  # one sample an interval
    got = await reg.metrics(_stage("ap-south-1")).fetch(_stage("ap-south-1"), errors, _window(clock[0]),
                                                        ("baseline", "0.9.0"), ("canary", "1.0.0"))
    assert _requests_per_sample(got.canary) == 3000  # a half share, not a third: each sample counts 1.5x the requests
    await router.set_weights({"eu-west-1": 100})
    clock[0] += timedelta(minutes=5)
    assert [await samples(r) for r in ("us-east-1", "eu-west-1", "ap-south-1")] == [60, 60, 60]
    assert await samples("eu-west-1", errors) == 60


async def test_a_real_deployers_replicas_reach_the_fleet_through_its_own_adapter():
    """A stage run by a real deployer but measured by the simulated fleet: the fleet learns its replicas when
    anything reads or scales them through the registry's deployer, so pre-warm relieves overload."""
    from activities.adapters.simulated import SimulatedFleet

    class Deployer:  # the interface a real deployer implements, holding replicas only
        def __init__(self) -> None:
            self.count = 4

        async def replicas(self, stage: StageRef) -> int:
            return self.count

        async def scale(self, stage: StageRef, replicas: int) -> None:
            self.count = replicas

    fleet = SimulatedFleet()
    reg = registry_from_targets(parse_targets({"defaults": {"metrics": {"kind": "simulated"}, "deployer": {"kind": "simulated"}},
                                               "targets": [{"region": "us-east-1", "environment": "prod"}]}), fleet)
    real = Deployer()
    reg.deployers["us-east-1/prod"] = real  # type: ignore[assignment]
    from activities.adapters.registry import _let_the_fleet_observe

    _let_the_fleet_observe(reg, fleet)
    deployer = reg.deployer(_stage("us-east-1"))
    assert deployer is not real and fleet.load.replicas(_stage("us-east-1")) == 4
    real.count = 6
    assert await deployer.replicas(_stage("us-east-1")) == 6 and fleet.load.replicas(_stage("us-east-1")) == 6
    await deployer.scale(_stage("us-east-1"), 9)
    assert real.count == 9 and fleet.load.replicas(_stage("us-east-1")) == 9


def test_nothing_is_wrapped_where_every_metric_is_real():
    reg = registry_from_targets(parse_targets({"targets": [
        target("us-east-1", {"route53": R53}, metrics=PROM), target("eu-west-1", {"route53": R53}, metrics=PROM)]}))
    router = reg.traffic_target("us-east-1", "prod").router_for("pay")  # type: ignore[union-attr]
    assert type(router).__name__ == "Route53Traffic"
