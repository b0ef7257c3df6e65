"""The simulated canary router: compare-and-set writes, and sample counts that follow each arm's share."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from activities.adapters.registry import AdapterRegistry
from activities.adapters.routers.base import RouterConflict
from activities.adapters.simulated import FleetScenario, SimulatedFleet
from canary.config import MetricSpec
from common.traffic.arms import WITHDRAWN, ArmWeights
from common.types import MetricWindow, StageRef

pytestmark = pytest.mark.unit
STAGE = StageRef(service="payments", region="us-east-1", environment="prod")


async def test_writes_are_compare_and_set_and_a_retry_finds_its_own_write():
    fleet = SimulatedFleet()
    router = AdapterRegistry.simulated(fleet).router(STAGE)
    assert router is not None and router.kind == "simulated"
    assert await router.weights(STAGE) == WITHDRAWN
    five, quarter = ArmWeights.step(5), ArmWeights.step(25)
    assert await router.set_weights(STAGE, five, expect=WITHDRAWN) == five
    assert await router.set_weights(STAGE, five, expect=WITHDRAWN) == five  # a retry of a write that landed
    with pytest.raises(RouterConflict):
        await router.set_weights(STAGE, quarter, expect=WITHDRAWN)  # someone moved it: never overwritten
    assert await router.weights(STAGE) == five
    assert await router.set_weights(STAGE, WITHDRAWN, expect=None) == WITHDRAWN  # withdrawing always writes
    assert [e.after for e in fleet.effects if e.field == "weights"] == [five.model_dump(), WITHDRAWN.model_dump()]


async def test_each_arm_yields_samples_in_proportion_to_its_share():
    fleet = SimulatedFleet(FleetScenario(full_sample_share=20))
    start = datetime(2026, 1, 1, tzinfo=UTC)
    window = MetricWindow(start=start, end=start + timedelta(minutes=60), interval_seconds=60)
    metric = MetricSpec(name="latency_p99", kind="latency")

    async def counts() -> tuple[int, int]:
        got = await fleet.fetch(STAGE, metric, window, ("baseline", "1.0.0"), ("canary", "2.0.0"))
        return len(got.baseline), len(got.canary)

    assert await counts() == (60, 60)  # never weighted: one sample per interval, as before
    router = AdapterRegistry.simulated(fleet).router(STAGE)
    assert router is not None
    await router.set_weights(STAGE, ArmWeights.step(5), expect=None)
    assert await counts() == (15, 15)  # 5% of the traffic: a quarter of the samples
    await router.set_weights(STAGE, ArmWeights.step(25), expect=None)
    assert await counts() == (60, 60)
    await router.set_weights(STAGE, ArmWeights.step(10, baseline_same=False), expect=None)
    assert await counts() == (0, 30)  # a baseline without traffic yields nothing
    await router.set_weights(STAGE, WITHDRAWN, expect=None)
    assert await counts() == (0, 0)


def test_a_registry_from_targets_gives_the_fleets_router_only_where_the_fleet_deploys():
    from activities.adapters.registry import registry_from_targets
    from activities.adapters.targets import TargetsFile

    sim = registry_from_targets(TargetsFile.model_validate(
        {"defaults": {"deployer": {"kind": "simulated"}, "metrics": {"kind": "simulated"}}}))
    assert sim.router(STAGE) is not None and sim.router(STAGE).kind == "simulated"  # type: ignore[union-attr]
    none = registry_from_targets(TargetsFile.model_validate({}))
    assert none.router(STAGE) is None
