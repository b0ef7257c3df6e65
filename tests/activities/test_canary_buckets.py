"""A canary analysis reads both arms' latency buckets from the metric source (here the simulated fleet with
`latency_histograms`) and the judge compares the tails request by request."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from temporalio.testing import ActivityEnvironment

from activities.adapters.registry import AdapterRegistry
from activities.adapters.reports import NoReports
from activities.adapters.simulated import FleetScenario, SimulatedFleet, VersionEffect
from activities.analysis import AnalysisActivities
from activities.models import AnalysisInput
from canary.config import JudgeConfig, MetricSpec
from common.types import MetricWindow, StageRef

STAGE = StageRef(service="checkout", region="eu-west-1", environment="prod")
METRICS = [MetricSpec(name="latency_p99", kind="latency"), MetricSpec(name="error_rate", kind="error_rate")]
START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def analysis(canary: str) -> AnalysisInput:
    return AnalysisInput(
        stage=STAGE, rollout_id=f"rollout/checkout/{canary}", analysis_id="eu-west-1-prod-canary", metrics=METRICS,
        judge=JudgeConfig(), window=MetricWindow(start=START, end=START + timedelta(minutes=60), interval_seconds=60),
        baseline_version="1.9.0", canary_version=canary,
    )


def fleet(histograms: bool) -> SimulatedFleet:
    return SimulatedFleet(FleetScenario(fresh_draws=False, initial_version="1.9.0", latency_histograms=histograms,
                                        requests_per_interval=200,
                                        effects=[VersionEffect(version="2.1.0", latency_factor=1.3)]))


async def test_the_simulated_fleets_buckets_reach_the_canary_analysis() -> None:
    acts = AnalysisActivities(AdapterRegistry.simulated(fleet(True)), NoReports())
    good = await ActivityEnvironment().run(acts.analyze_canary, analysis("2.0.0"))
    latency = good.result.metrics[0]
    assert "buckets_tail_up" in latency.tests and "tail_up" not in latency.tests, latency.tests
    assert good.result.verdict == "pass", good.result.summary
    bad = await ActivityEnvironment().run(acts.analyze_canary, analysis("2.1.0"))
    assert bad.result.verdict == "fail" and bad.result.metrics[0].tests["buckets_tail_up"] < 1e-6


async def test_a_source_without_buckets_judges_as_before() -> None:
    acts = AnalysisActivities(AdapterRegistry.simulated(fleet(False)), NoReports())
    out = await ActivityEnvironment().run(acts.analyze_canary, analysis("2.0.0"))
    assert "buckets_tail_up" not in out.result.metrics[0].tests and "tail_up" in out.result.metrics[0].tests
