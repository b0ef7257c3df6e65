"""Latency histograms for the region guard: Prometheus' cumulative `le` series read as per-step bucket counts, the
targets file's `histograms` checked naming the field, and the simulated fleet's buckets reaching the guard's look."""

from __future__ import annotations

import math
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from activities.adapters.base import MetricsError
from activities.adapters.prometheus import buckets_of
from activities.adapters.registry import registry_from_targets
from activities.adapters.simulated import FleetScenario, SimulatedFleet
from activities.adapters.targets import TargetsError, parse_targets
from activities.guard import GuardActivities
from activities.guard_models import GuardLookInput, GuardLookResult
from canary.guard import GuardJudge
from tests.workflows.evacuation_helpers import simulated_targets

BUCKET_Q = 'sum by (le) (increase(lat_bucket{service="{service}",version="{version}"}[3s]))'


def series(le: str, values: list[float]) -> dict[str, Any]:
    return {"metric": {"le": le}, "values": [[1000 + 3 * i, str(v)] for i, v in enumerate(values)]}


def test_cumulative_le_series_become_per_step_bucket_counts() -> None:
    got = buckets_of([series("+Inf", [10, 20]), series("0.1", [4, 5]), series("0.5", [9, 19])], 0.99, "x", "q")
    assert got is not None and got.le == [0.1, 0.5] and got.quantile == 0.99
    assert got.counts == [[4, 5, 1], [5, 14, 1]]


def test_a_step_missing_in_some_le_is_left_out_and_noise_never_makes_a_negative_count() -> None:
    inf = series("+Inf", [10, 20, 30])
    low = {"metric": {"le": "0.1"}, "values": [[1000, "6"], [1006, "5"]]}  # no point at 1003
    got = buckets_of([inf, low, series("0.5", [5.5, 19, 31])], 0.99, "x", "q")
    assert got is not None and len(got.counts) == 2
    assert all(c >= 0 for row in got.counts for c in row)
    assert math.isclose(sum(got.counts[1]), 31)  # a cumulative count that fell below a lower bound's is lifted


@pytest.mark.parametrize("bad", [[series("0.1", [1])], [{"metric": {}, "values": [[1000, "1"]]}]])
def test_series_that_are_not_a_histogram_are_refused_with_the_query(bad: list[dict[str, Any]]) -> None:
    with pytest.raises(MetricsError) as err:
        buckets_of(bad, 0.99, "could not read the buckets", "the-query")
    assert "the-query" in str(err.value) and err.value.retryable is False


def _targets(histograms: dict[str, Any]) -> dict[str, Any]:
    return {"targets": [{"environment": "prod", "region": "us-east-1",
                         "deployer": {"kind": "simulated"},
                         "metrics": {"kind": "prometheus", "url": "http://prom:9090",
                                     "queries": {"latency_p99": 'x{version="{version}"}'},
                                     "histograms": histograms}}]}


@pytest.mark.parametrize(("histograms", "where"), [
    ({"latency_p99": {"query": 'sum by (le) (x_bucket{job="a"})'}}, "{version}"),
    ({"latency_p99": {"query": 'sum(x{version="{version}"})'}}, "le"),
    ({"latency_p99": {"query": BUCKET_Q, "quantile": 1.5}}, "quantile"),
    ({"latency_p99": {"query": BUCKET_Q.replace("{service}", "{svc}")}}, "{svc}"),
    ({"p50": {"query": BUCKET_Q}}, "histograms.p50"),
])
def test_a_bad_histogram_config_is_refused_naming_the_field(histograms: dict[str, Any], where: str) -> None:
    with pytest.raises(TargetsError) as err:
        parse_targets(_targets(histograms))
    assert where in str(err.value) and "histograms" in str(err.value)


def test_a_good_histogram_config_reaches_the_source() -> None:
    registry = registry_from_targets(parse_targets(_targets({"latency_p99": {"query": BUCKET_Q}})),
                                     SimulatedFleet(FleetScenario()))
    from common.types import StageRef

    source = registry.metrics(StageRef(service="shop", region="us-east-1", environment="prod"))
    assert source.settings.histograms == {"latency_p99": (BUCKET_Q, 0.99)}


@pytest.mark.asyncio
async def test_the_simulated_fleets_buckets_reach_the_guards_judgement() -> None:
    fleet = SimulatedFleet(FleetScenario(fresh_draws=False, min_samples=60, requests_per_interval=40,
                                         latency_histograms=True))
    registry = registry_from_targets(parse_targets(simulated_targets()), fleet)
    inp = GuardLookInput(service="shop", look=1, window_seconds=60, sample_interval_seconds=1, judge=GuardJudge(),
                         steps=[0], readiness=False)
    result: GuardLookResult = await ActivityEnvironment().run(GuardActivities(registry).guard_look, inp)
    assert result.looks and all("buckets of 2400 and" in x.summary for x in result.looks), [
        x.summary for x in result.looks]


def _prometheus(query: str, seen: list[str]) -> Any:
    import httpx

    from activities.adapters.prometheus import PrometheusSettings, PrometheusSource

    def answer(request: httpx.Request) -> httpx.Response:
        from urllib.parse import parse_qs

        seen.append(parse_qs(request.content.decode())["query"][0])
        result = [series("+Inf", [10, 20]), series("0.5", [9, 19])]
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "matrix", "result": result}})
    return PrometheusSource(PrometheusSettings(url="http://prom", queries={}, histograms={"latency_p99": (query, 0.99)}),
                            transport=httpx.MockTransport(answer))


@pytest.mark.asyncio
async def test_step_fills_the_range_and_a_range_longer_than_the_step_is_refused() -> None:
    from datetime import UTC, datetime, timedelta

    from canary.config import MetricSpec
    from common.types import MetricWindow, StageRef

    stage = StageRef(service="shop", region="us-east-1", environment="prod")
    end = datetime(2026, 1, 1, tzinfo=UTC)
    w = MetricWindow(start=end - timedelta(seconds=6), end=end, interval_seconds=3)
    spec = MetricSpec(name="latency_p99", kind="latency")
    seen: list[str] = []
    got = await _prometheus(BUCKET_Q.replace("[3s]", "[{step}]"), seen).fetch_histogram(stage, spec, w, "primary", "2")
    assert got is not None and got.counts == [[9, 1], [19, 1]] and "[3s]" in seen[0]
    with pytest.raises(MetricsError) as err:  # a minute of requests at every 3 s step: each counted 20 times
        await _prometheus(BUCKET_Q.replace("[3s]", "[1m]"), seen).fetch_histogram(stage, spec, w, "primary", "2")
    assert "histograms.latency_p99.query" in str(err.value) and "20 steps" in str(err.value)
