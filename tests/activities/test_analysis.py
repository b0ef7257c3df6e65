"""The analysis activities: the verdict names its report without drawing it; render_report draws and stores it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.adapters.registry import AdapterRegistry
from activities.adapters.reports import LocalReportStore, NoReports, report_key
from activities.adapters.simulated import FleetScenario, SimulatedFleet, VersionEffect
from activities.analysis import AnalysisActivities
from activities.models import AnalysisInput, ReportInput, SoakCheckInput
from canary import report
from canary.config import JudgeConfig, MetricSpec
from common.types import MetricWindow, StageRef
from worker.build import RenderPool

STAGE = StageRef(service="checkout", region="eu-west-1", environment="prod")
METRICS = [MetricSpec(name="latency_p99", kind="latency"), MetricSpec(name="error_rate", kind="error_rate")]
START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def analysis_input(minutes: int = 60, canary: str = "2.0.0") -> AnalysisInput:
    return AnalysisInput(
        stage=STAGE, rollout_id="rollout/checkout/2.0.0", analysis_id="eu-west-1-prod-canary", metrics=METRICS,
        judge=JudgeConfig(), window=MetricWindow(start=START, end=START + timedelta(minutes=minutes), interval_seconds=60),
        baseline_version="1.9.0", canary_version=canary,
    )


def fleet() -> SimulatedFleet:
    return SimulatedFleet(FleetScenario(fresh_draws=False, initial_version="1.9.0", effects=[
        VersionEffect(version="2.1.0", error_factor=5.0),  # a regression the judge and the monitor must see
    ]))


class CountingPool(RenderPool):
    """The worker's render pool, counting what it was given to run."""

    def __init__(self) -> None:
        super().__init__(1)
        self.submitted: list[Callable[..., Any]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.submitted.append(fn)
        return super().submit(fn, *args, **kwargs)


@pytest.fixture(scope="module")
def pool() -> Iterator[CountingPool]:
    p = CountingPool()
    yield p
    p.shutdown()


@pytest.fixture
def store(tmp_path: Path) -> LocalReportStore:
    return LocalReportStore(tmp_path / "reports", "http://reports.example:8081")


async def test_analyze_canary_names_the_report_and_draws_nothing(store: LocalReportStore, monkeypatch: pytest.MonkeyPatch):
    def no_drawing(*args: object, **kwargs: object) -> str:
        raise AssertionError("analyze_canary must not render")

    monkeypatch.setattr(report, "render_html", no_drawing)
    monkeypatch.setattr(report, "ecdf_png", no_drawing)
    acts = AnalysisActivities(AdapterRegistry.simulated(fleet()), store)
    out = await ActivityEnvironment().run(acts.analyze_canary, analysis_input(canary="2.1.0"))
    assert out.result.verdict == "fail"
    assert out.report_url == "http://reports.example:8081/rollout_checkout_2.0.0/eu-west-1-prod-canary.html"
    assert out.report_url == store.url_for("rollout/checkout/2.0.0", "eu-west-1-prod-canary")
    assert not store.root.exists()  # nothing written, not even the folder


async def test_a_worker_with_reports_off_judges_without_a_link():
    acts = AnalysisActivities(AdapterRegistry.simulated(fleet()), NoReports())
    out = await ActivityEnvironment().run(acts.analyze_canary, analysis_input(canary="2.1.0"))
    assert out.result.verdict == "fail" and out.report_url is None  # no link, so the stage starts no drawing


@pytest.mark.process  # the render pool's processes
async def test_render_report_stores_the_page_in_the_pool_and_a_retry_changes_nothing(
        store: LocalReportStore, pool: CountingPool):
    acts = AnalysisActivities(AdapterRegistry.simulated(fleet()), store, pool)
    env = ActivityEnvironment()
    judged = await env.run(acts.analyze_canary, analysis_input(canary="2.1.0"))
    heartbeats: list[Any] = []
    env.on_heartbeat = lambda *details: heartbeats.append(details)
    inp = ReportInput.for_canary(analysis_input(canary="2.1.0"), judged.result)
    ref = await env.run(acts.render_report, inp)

    assert ref.url == judged.report_url and ref.key == report_key(inp.rollout_id, inp.analysis_id)
    path = store.root / ref.key
    first = path.read_text()
    assert ref.size_bytes == len(first.encode()) and "FAIL — score" in first
    assert first.count("<img alt='ECDF of") == 2 and first.count("<img alt='Time series of") == 2
    assert pool.submitted and pool.submitted[-1].func is report.render_html  # type: ignore[attr-defined]
    assert heartbeats and heartbeats[0] == ("fetching metrics",)

    env.info = dataclasses.replace(env.info, attempt=2)  # Temporal retries with the same input
    again = await env.run(acts.render_report, inp)
    assert again == ref and path.read_text() == first
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temporary files left behind


@pytest.mark.process  # the render pool's processes
async def test_render_report_without_a_result_judges_the_same_samples_again(store: LocalReportStore, pool: CountingPool):
    acts = AnalysisActivities(AdapterRegistry.simulated(fleet()), store, pool)
    env = ActivityEnvironment()
    judged = await env.run(acts.analyze_canary, analysis_input())
    ref = await env.run(acts.render_report, ReportInput.for_canary(analysis_input()))
    page = (store.root / ref.key).read_text()
    assert f"{judged.result.verdict.upper()} — score {judged.result.score:.2f}" in page


@pytest.mark.process  # the render pool's processes
async def test_samples_never_enter_the_inputs_or_results(store: LocalReportStore, pool: CountingPool):
    """History holds inputs and results: their size must not grow with the window (the samples are re-fetched)."""
    acts = AnalysisActivities(AdapterRegistry.simulated(fleet()), store, pool)
    env = ActivityEnvironment()
    sizes = []
    for minutes in (60, 1200):
        inp = analysis_input(minutes)
        judged = await env.run(acts.analyze_canary, inp)
        report_in = ReportInput.for_canary(inp, judged.result)
        ref = await env.run(acts.render_report, report_in)
        assert judged.result.metrics[0].baseline_n == minutes  # the judge did see every sample
        sizes.append((len(report_in.model_dump_json()), len(ref.model_dump_json()), ref.size_bytes))
    (in_short, ref_short, page_short), (in_long, ref_long, page_long) = sizes
    assert abs(in_long - in_short) < 100 and abs(ref_long - ref_short) < 10
    assert page_long > page_short  # while the page itself did draw the longer series


@pytest.mark.process  # the render pool's processes
async def test_an_alarming_soak_look_names_its_report_and_renders_it(store: LocalReportStore, pool: CountingPool):
    acts = AnalysisActivities(AdapterRegistry.simulated(fleet()), store, pool)
    env = ActivityEnvironment()

    def look(version: str) -> SoakCheckInput:
        return SoakCheckInput(stage=STAGE, rollout_id=f"rollout/checkout/{version}", metrics=METRICS, judge=JudgeConfig(),
                              window=MetricWindow(start=START, end=START + timedelta(minutes=120), interval_seconds=60),
                              baseline_version="1.9.0", canary_version=version, look=2, max_looks=6)

    quiet = await env.run(acts.soak_check, look("2.0.0"))
    assert not quiet.monitor.alarm and quiet.report_url is None

    check = look("2.1.0")
    alarmed = await env.run(acts.soak_check, check)
    assert alarmed.monitor.alarm
    assert alarmed.report_url == store.url_for("rollout/checkout/2.1.0", "eu-west-1-prod-soak-2")
    assert not store.root.exists()
    ref = await env.run(acts.render_report, ReportInput.for_soak_look(check, alarmed.monitor))
    assert ref.url == alarmed.report_url
    page = (store.root / ref.key).read_text()
    assert "ALARM — soak look 2 of 6" in page and "soak look 2/6" in page
    assert page.count("<img alt='Time series of") == len(METRICS)


@pytest.mark.process  # the render pool's processes
async def test_a_store_that_cannot_write_fails_the_render_not_the_verdict(tmp_path: Path, pool: CountingPool):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    acts = AnalysisActivities(AdapterRegistry.simulated(fleet()), LocalReportStore(blocker / "reports"), pool)
    env = ActivityEnvironment()
    judged = await env.run(acts.analyze_canary, analysis_input())
    assert judged.result.verdict == "pass" and judged.report_url is not None
    with pytest.raises(ApplicationError, match="cannot write report") as err:
        await env.run(acts.render_report, ReportInput.for_canary(analysis_input(), judged.result))
    assert err.value.type == "ReportError" and err.value.non_retryable  # a file where the folder should be stays so


async def test_a_canary_in_a_drained_region_is_never_judged_a_pass(store: LocalReportStore):
    """Issue #19 item 5: eu-west-1 drained through the real traffic activity (which knows nothing of the simulated
    fleet) leaves its canary no samples, so its analysis is insufficient data, not `pass 100`; once the traffic is
    back it passes again."""
    from activities.adapters.registry import registry_from_targets
    from activities.adapters.targets import parse_targets
    from activities.traffic.messages import SetWeightsInput
    from activities.traffic.shift import TrafficActivities

    sim = fleet()
    sim.load.clock = lambda: START - timedelta(hours=1)  # when the weights change: before the analysis window
    registry = registry_from_targets(parse_targets({
        "defaults": {"deployer": {"kind": "simulated"}, "metrics": {"kind": "simulated"}},
        "targets": [{"region": r, "environment": "prod", "traffic": {"simulated": {"weight": 100}}}
                    for r in ("us-east-1", "eu-west-1")]}), sim)
    traffic, analysis = TrafficActivities(registry), AnalysisActivities(registry, store)
    env = ActivityEnvironment()
    regions = {"us-east-1": "us-east-1", "eu-west-1": "eu-west-1"}

    async def move(eu_west_1: int, expect: dict[str, int]) -> None:
        await env.run(traffic.set_weights, SetWeightsInput(service="checkout", region="eu-west-1", regions=regions,
                                                           weights={"eu-west-1": eu_west_1}, expect=expect))

    await move(0, {"us-east-1": 100, "eu-west-1": 100})
    drained = await env.run(analysis.analyze_canary, analysis_input())
    assert drained.result.verdict == "insufficient_data"
    sim.load.clock = lambda: START - timedelta(minutes=30)
    await move(100, {"us-east-1": 100, "eu-west-1": 0})
    assert (await env.run(analysis.analyze_canary, analysis_input())).result.verdict == "pass"
