"""The simulated fleet's traffic model as workers share it, and the region guard on its samples at partial traffic.

Issue #19: a worker started after another was SIGKILLed must see the pre-warm and the weights the dead one left
(real receivers keep their replicas); a region still serving with doubled errors is unhealthy whatever its share;
successive looks see new samples.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from activities.adapters.base import TrafficError
from activities.adapters.registry import AdapterRegistry, registry_from_targets
from activities.adapters.simulated import FleetScenario, SimulatedFleet
from activities.adapters.targets import parse_targets
from canary.config import MetricSpec
from canary.guard import GuardJudge, RegionSamples, look_fleet
from common.types import MetricWindow, StageRef

REGIONS = ("us-east-1", "eu-west-1", "ap-south-1")
SPECS = [MetricSpec(name="latency_p99", kind="latency", allowed_increase=1.2),
         MetricSpec(name="error_rate", kind="error_rate", critical=True, allowed_increase=1.5)]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
SICK = "2.0.0"


def _stage(region: str) -> StageRef:
    return StageRef(service="pay", region=region, environment="prod")


def _window(end: datetime) -> MetricWindow:
    return MetricWindow(start=end - timedelta(minutes=1), end=end, interval_seconds=1)


def _fleet(state_file: Path | None = None, seed: int = 7) -> SimulatedFleet:
    scenario = FleetScenario(seed=seed, min_samples=60, effects=[
        {"version": SICK, "regions": ["eu-west-1"], "error_factor": 2.0}])
    return SimulatedFleet(scenario, state_file=state_file)


def _registry(fleet: SimulatedFleet) -> AdapterRegistry:
    return registry_from_targets(parse_targets({
        "defaults": {"deployer": {"kind": "simulated"}, "metrics": {"kind": "simulated"}},
        "targets": [{"region": r, "environment": "prod", "traffic": {"simulated": {"weight": 100}}} for r in REGIONS]}),
        fleet)


async def test_a_fresh_worker_sees_the_pre_warm_and_the_weights_another_left(tmp_path: Path):
    """Two fleets on one file (two worker processes, or one SIGKILLed and its successor): one pre-warms the
    receivers and drains eu-west-1; the other, which saw none of it, finds the same weights, replicas and load."""
    clock = [T0]
    first = _fleet(tmp_path / "fleet.db")
    first.load.clock = lambda: clock[0]
    router = _registry(first).traffic_target("eu-west-1", "prod").router_for("pay")  # type: ignore[union-attr]
    await router.weights()  # an even split at 60% load
    clock[0] += timedelta(minutes=1)
    for receiver in ("us-east-1", "ap-south-1"):
        await _registry(first).deployer(_stage(receiver)).scale(_stage(receiver), 8)  # pre-warm: 4 -> 8
    clock[0] += timedelta(minutes=1)
    await router.set_weights({"eu-west-1": 0}, expect={r: 100 for r in REGIONS})
    first.close()  # the first worker is gone

    fresh = _fleet(tmp_path / "fleet.db")
    fresh_router = _registry(fresh).traffic_target("eu-west-1", "prod").router_for("pay")  # type: ignore[union-attr]
    assert await fresh_router.weights() == {"us-east-1": 100, "eu-west-1": 0, "ap-south-1": 100}
    end = T0 + timedelta(minutes=5)
    effect = fresh.load.effect(_stage("us-east-1"), _window(end))
    assert effect.utilization == pytest.approx(0.45) and effect.latency_factor == 1.0  # 90% of 4 replicas, now 8
    assert fresh.load.effect(_stage("eu-west-1"), _window(end)).traffic == 0.0
    assert await fresh.replicas(_stage("ap-south-1")) == 8
    # the past keeps its own load for the fresh worker too: before the pre-warm, 60% of 4 replicas
    assert fresh.load.effect(_stage("us-east-1"), _window(T0 + timedelta(seconds=30))).utilization == pytest.approx(0.6)
    fresh.close()


async def test_a_changed_simulated_weight_is_guarded_across_workers(tmp_path: Path):
    """A change made through one worker's record set is what another's `expect` is checked against."""
    a, b = _fleet(tmp_path / "fleet.db"), _fleet(tmp_path / "fleet.db")
    ra = _registry(a).traffic_target("eu-west-1", "prod").router_for("pay")  # type: ignore[union-attr]
    rb = _registry(b).traffic_target("eu-west-1", "prod").router_for("pay")  # type: ignore[union-attr]
    await ra.set_weights({"eu-west-1": 50})
    with pytest.raises(TrafficError, match="changed under us"):
        await rb.set_weights({"eu-west-1": 0}, expect={r: 100 for r in REGIONS})
    assert await rb.set_weights({"eu-west-1": 0}, expect={"us-east-1": 100, "eu-west-1": 50, "ap-south-1": 100}) == {
        "us-east-1": 100, "eu-west-1": 0, "ap-south-1": 100}
    assert await ra.weights() == {"us-east-1": 100, "eu-west-1": 0, "ap-south-1": 100}
    a.close()
    b.close()


async def _look(fleet: SimulatedFleet, end: datetime, sick: bool, look: int) -> bool:
    """Whether the guard judges eu-west-1 unhealthy at one look over the minute before `end`."""
    regions = []
    for r in REGIONS:
        version = SICK if sick and r == "eu-west-1" else "1.0.0"
        got = [await fleet.fetch(_stage(r), m, _window(end), ("primary", None), ("primary", version)) for m in SPECS]
        regions.append(RegionSamples(region=r, metrics={m.name: s.canary for m, s in zip(SPECS, got)}))
    return next(v for v in look_fleet(GuardJudge(), SPECS, regions, [], look) if v.region == "eu-west-1").unhealthy


@pytest.mark.parametrize("weights", [(125, 50, 125), (140, 20, 140)])
async def test_a_region_with_doubled_errors_at_a_small_share_is_caught(weights: tuple[int, int, int]):
    """The weights a reverted evacuation left (eu-west-1 at 50 of 300), and a smaller share: fewer requests per
    sample, so noisier samples, but the rate stays doubled; the guard sees it in two looks in a row (K = 2) within
    a few looks, on fresh samples every look."""
    fleet = _fleet()
    fleet.load.clock = lambda: T0
    fleet.load.observe_weights("pay", "prod", dict(zip(REGIONS, weights)))
    verdicts = [await _look(fleet, T0 + timedelta(minutes=10, seconds=5 * i), True, i) for i in range(1, 21)]
    assert sum(verdicts) >= (20 if weights[1] == 50 else 8), verdicts
    assert any(a and b for a, b in zip(verdicts, verdicts[1:5])), verdicts  # sick for K = 2 looks within 5 looks


@pytest.mark.parametrize("weights", [(125, 50, 125), (150, 10, 150)])
async def test_a_healthy_region_at_a_small_share_is_not_judged_unhealthy(weights: tuple[int, int, int]):
    """Its error-rate samples spread wider than its peers' (fewer requests each) at the same mean: no alarm."""
    fleet = _fleet(seed=11)
    fleet.load.clock = lambda: T0
    fleet.load.observe_weights("pay", "prod", dict(zip(REGIONS, weights)))
    verdicts = [await _look(fleet, T0 + timedelta(minutes=10, seconds=5 * i), False, i) for i in range(1, 41)]
    assert not any(verdicts)


async def test_each_window_gets_its_own_samples_and_the_same_window_the_same():
    fleet = _fleet()
    errors = SPECS[1]

    async def draw(end: datetime, seed_fleet: SimulatedFleet = fleet) -> list[float]:
        return (await seed_fleet.fetch(_stage("us-east-1"), errors, _window(end), ("primary", None),
                                       ("primary", "1.0.0"))).canary

    a, b = await draw(T0 + timedelta(minutes=10)), await draw(T0 + timedelta(minutes=10, seconds=5))
    assert a != b  # the next look sees new samples
    assert await draw(T0 + timedelta(minutes=10)) == a == await draw(T0 + timedelta(minutes=10), _fleet())
    other = (await fleet.fetch(StageRef(service="cart", region="us-east-1", environment="prod"), errors,
                               _window(T0 + timedelta(minutes=10)), ("primary", None), ("primary", "1.0.0"))).canary
    assert other != a  # another service is another draw


async def test_a_fleet_without_fresh_draws_gives_a_primary_the_same_samples_whatever_the_window_or_service():
    # the tests' fleets: a health verdict on a random service name at whatever hour must be the same every run
    fleet = SimulatedFleet(FleetScenario(seed=11, min_samples=60, fresh_draws=False))
    errors = SPECS[1]

    async def draw(svc: str, end: datetime) -> list[float]:
        return (await fleet.fetch(StageRef(service=svc, region="us-east-1", environment="prod"), errors, _window(end),
                                  ("primary", None), ("primary", "1.0.0"))).canary

    a = await draw("pay", T0 + timedelta(minutes=10))
    assert a and a == await draw("pay", T0 + timedelta(minutes=10, seconds=5)) == await draw("cart", T0 + timedelta(hours=7))
    assert a != (await fleet.fetch(_stage("us-east-1"), errors, _window(T0 + timedelta(minutes=10)), ("primary", None),
                                   ("primary", "2.0.0"))).canary  # another version is another draw
