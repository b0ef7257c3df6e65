"""The Prometheus metric source against a real Prometheus loaded with synthetic baseline and canary series."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from activities.adapters.base import MetricsError
from activities.adapters.prometheus import PrometheusSettings, PrometheusSource
from canary import judge
from canary.config import JudgeConfig, MetricSpec
from common.types import MetricWindow, StageRef
from tests.integration.conftest import BAD, BASELINE, GOOD, IDLE, PARTIAL, SERVICE, Front, PrometheusServer, assert_one_line
from tests.integration.promdata import QUERIES

pytestmark = pytest.mark.integration

STAGE = StageRef(service=SERVICE, region="us-east-1", environment="prod")
SPECS = [
    MetricSpec(name="latency_p99", kind="latency", direction="increase"),
    MetricSpec(name="error_rate", kind="error_rate", direction="increase", critical=True),
]


def window(prom: PrometheusServer, minutes: int = 60, interval: int = 60) -> MetricWindow:
    end = datetime.fromtimestamp(prom.now, UTC)
    return MetricWindow(start=end - timedelta(minutes=minutes), end=end, interval_seconds=interval)


def source(url: str, **overrides: object) -> PrometheusSource:
    settings = dict(url=url, queries=dict(QUERIES), backoff_seconds=0.01, timeout_seconds=5)
    settings.update(overrides)
    return PrometheusSource(PrometheusSettings(**settings))  # type: ignore[arg-type]


async def fetch_all(src: PrometheusSource, w: MetricWindow, canary_version: str):
    return [await src.fetch(STAGE, spec, w, ("baseline", BASELINE), ("canary", canary_version)) for spec in SPECS]


async def test_a_healthy_canary_passes_the_judge(prometheus: PrometheusServer):
    data = await fetch_all(source(prometheus.url), window(prometheus), GOOD)
    for d in data:
        assert len(d.baseline) == len(d.canary) == 61  # one point per minute over an hour, both ends included
    result = judge.judge(JudgeConfig(min_samples=20), SPECS, data)
    assert result.verdict == "pass", result.summary


async def test_a_regressing_canary_fails_the_judge(prometheus: PrometheusServer):
    data = await fetch_all(source(prometheus.url), window(prometheus), BAD)
    latency = next(d for d in data if d.name == "latency_p99")
    assert sum(latency.canary) / len(latency.canary) > 1.5 * sum(latency.baseline) / len(latency.baseline)
    result = judge.judge(JudgeConfig(min_samples=20), SPECS, data)
    assert result.verdict == "fail", result.summary
    assert {m.name: m.classification for m in result.metrics} == {"latency_p99": "High", "error_rate": "High"}


async def test_no_data_partial_data_and_nan_are_reported_as_such(prometheus: PrometheusServer):
    src, w = source(prometheus.url), window(prometheus)
    missing = await src.fetch(STAGE, SPECS[0], w, ("baseline", BASELINE), ("canary", "7.7.7"))
    assert missing.canary == [] and len(missing.baseline) == 61
    partial = await src.fetch(STAGE, SPECS[0], w, ("baseline", BASELINE), ("canary", PARTIAL))
    assert 25 <= len(partial.canary) <= 33  # the version exists only for the last half hour
    idle = await src.fetch(STAGE, SPECS[1], w, ("baseline", BASELINE), ("canary", IDLE))
    assert len(idle.canary) == 61 and all(math.isnan(v) for v in idle.canary)  # 0/0: no requests at all
    no_baseline = await src.fetch(STAGE, SPECS[0], w, ("baseline", None), ("canary", GOOD))
    assert no_baseline.baseline == [] and len(no_baseline.canary) == 61

    result = judge.judge(JudgeConfig(min_samples=40), [SPECS[0]], [partial])
    assert result.verdict == "insufficient_data"  # the judge, not the adapter, decides what too little means


async def test_bad_promql_is_a_permanent_error_quoting_prometheus(prometheus: PrometheusServer):
    src = source(prometheus.url, queries={"latency_p99": 'rate(http_requests_total{version="{version}"[5m])'})
    with pytest.raises(MetricsError) as err:
        await src.fetch(STAGE, SPECS[0], window(prometheus), ("baseline", BASELINE), ("canary", GOOD))
    assert not err.value.retryable
    assert "bad_data" in str(err.value) and "parse error" in str(err.value) and "targets file" in str(err.value)


async def test_a_query_returning_several_series_is_rejected(prometheus: PrometheusServer):
    src = source(prometheus.url, queries={"latency_p99": 'rate(http_requests_total{version="{version}"}[3m])'})
    with pytest.raises(MetricsError) as err:
        await src.fetch(STAGE, SPECS[0], window(prometheus), ("baseline", BASELINE), ("canary", GOOD))
    assert not err.value.retryable and "one series per side" in str(err.value)


async def test_missing_template_and_wrong_url_are_permanent(prometheus: PrometheusServer):
    with pytest.raises(MetricsError) as err:
        await source(prometheus.url, queries={"other": QUERIES["error_rate"]}).fetch(
            STAGE, SPECS[0], window(prometheus), ("baseline", BASELINE), ("canary", GOOD))
    assert not err.value.retryable and "no PromQL template for metric 'latency_p99'" in str(err.value)
    with pytest.raises(MetricsError) as err:
        await source(prometheus.url + "/graph").fetch(STAGE, SPECS[0], window(prometheus), ("baseline", BASELINE), ("canary", GOOD))
    assert not err.value.retryable and "404" in str(err.value)


@pytest.fixture
def front_factory(prometheus: PrometheusServer) -> Iterator:
    fronts: list[Front] = []

    def make(**kwargs: object) -> Front:
        fronts.append(Front(prometheus.url, **kwargs))  # type: ignore[arg-type]
        return fronts[-1]

    yield make
    for f in fronts:
        f.close()


async def test_server_errors_are_retried_with_backoff(prometheus: PrometheusServer, front_factory):
    front = front_factory(failures=2)
    data = await source(front.url, max_attempts=3).fetch(
        STAGE, SPECS[0], window(prometheus), ("baseline", None), ("canary", GOOD))
    assert len(data.canary) == 61 and len(front.seen) == 3

    front = front_factory(failures=10)
    with pytest.raises(MetricsError) as err:
        await source(front.url, max_attempts=2).fetch(STAGE, SPECS[0], window(prometheus), ("baseline", None), ("canary", GOOD))
    assert err.value.retryable and "503 Service Unavailable" in str(err.value) and "overloaded" in str(err.value)


async def test_a_silent_server_times_out_as_retryable(prometheus: PrometheusServer, front_factory):
    front = front_factory(hang=True)
    with pytest.raises(MetricsError) as err:
        await source(front.url, timeout_seconds=0.3, max_attempts=2).fetch(
            STAGE, SPECS[0], window(prometheus), ("baseline", None), ("canary", GOOD))
    assert err.value.retryable and "no answer within 0.3s" in str(err.value)


async def test_bearer_token_comes_from_the_environment(prometheus: PrometheusServer, front_factory, monkeypatch):
    front = front_factory()
    monkeypatch.delenv("TEST_PROM_TOKEN", raising=False)
    with pytest.raises(MetricsError) as err:
        await source(front.url, token_env="TEST_PROM_TOKEN").fetch(
            STAGE, SPECS[0], window(prometheus), ("baseline", None), ("canary", GOOD))
    assert not err.value.retryable and "TEST_PROM_TOKEN" in str(err.value) and not front.seen
    monkeypatch.setenv("TEST_PROM_TOKEN", "prom-t0ken")
    await source(front.url, token_env="TEST_PROM_TOKEN").fetch(STAGE, SPECS[0], window(prometheus), ("baseline", None), ("canary", GOOD))
    assert front.seen[-1]["Authorization"] == "Bearer prom-t0ken"


# -- one-line errors ---------------------------------------------------------------------------------

async def test_a_rejected_query_is_one_line_with_status_error_type_and_fix(prometheus: PrometheusServer):
    src = source(prometheus.url, queries={"latency_p99": 'rate(http_requests_total{version="{version}"[5m])'})
    with pytest.raises(MetricsError) as err:
        await src.fetch(STAGE, SPECS[0], window(prometheus), ("baseline", BASELINE), ("canary", GOOD))
    assert_one_line(str(err.value), "could not read latency_p99 of the", "400 Bad Request bad_data on POST",
                    "/api/v1/query_range", "parse error", "fix the PromQL template in the targets file")


@pytest.mark.parametrize("status, parts, retryable", [
    (403, ["403 Forbidden on POST", "unavailable: overloaded", "check token_env"], False),
    (503, ["503 Service Unavailable on POST", "Prometheus is overloaded or failing (2 attempts)"], True),
])
async def test_http_errors_are_one_line_and_never_show_credentials_in_the_url(status: int, parts: list[str], retryable: bool):
    front = Front("http://127.0.0.1:9", failures=10, status=status)  # answers every request with `status` itself
    try:
        host = front.url.removeprefix("http://")
        src = source(f"http://bifrost:pr0m-pa55@{host}", max_attempts=2)
        w = MetricWindow(start=datetime.now(UTC) - timedelta(minutes=10), end=datetime.now(UTC), interval_seconds=60)
        with pytest.raises(MetricsError) as err:
            await src.fetch(STAGE, SPECS[0], w, ("baseline", None), ("canary", GOOD))
    finally:
        front.close()
    text = str(err.value)
    assert_one_line(text, f"could not read latency_p99 of the canary {GOOD} in us-east-1/prod", f"{host}/api/v1/query_range", *parts)
    assert "pr0m-pa55" not in text and "bifrost:" not in text and err.value.retryable is retryable


BUCKETS_QUERY = (
    'sum by (le) (increase(http_request_duration_seconds_bucket{service="{service}",region="{region}",'
    'env="{environment}",role="{role}",version="{version}"}[1m]))'
)
REQUESTS_QUERY = (
    'sum(increase(http_requests_total{service="{service}",region="{region}",env="{environment}",role="{role}",'
    'version="{version}"}[1m]))'
)


async def test_the_guards_buckets_and_request_counts_read_from_a_real_prometheus(prometheus: PrometheusServer):
    """The region guard's inputs: requests per step and a latency's buckets, read from the real server; the buckets'
    p99 agrees with histogram_quantile's over the same data, and a regressed version's is higher."""
    src = source(prometheus.url, queries={**QUERIES, "requests": REQUESTS_QUERY},
                 histograms={"latency_p99": (BUCKETS_QUERY, 0.99)})
    w = window(prometheus, minutes=30)
    requests = await src.fetch(STAGE, MetricSpec(name="requests", kind="throughput"), w, ("baseline", None),
                               ("canary", GOOD))
    assert len(requests.canary) == 31 and all(2000 < n < 4000 for n in requests.canary)  # 50 rps +-10 % a minute
    good = await src.fetch_histogram(STAGE, SPECS[0], w, "canary", GOOD)
    bad = await src.fetch_histogram(STAGE, SPECS[0], w, "canary", BAD)
    assert good is not None and bad is not None and len(good.counts) == 31
    assert sum(map(sum, good.counts)) == pytest.approx(sum(requests.canary), rel=0.01)
    from canary.guard_counts import Pooled

    assert Pooled.of(bad).value() > 1.5 * Pooled.of(good).value()
    p99 = await src.fetch(STAGE, SPECS[0], w, ("baseline", None), ("canary", GOOD))
    assert Pooled.of(good).value() == pytest.approx(sorted(p99.canary)[15], rel=0.2)
    assert await src.fetch_histogram(STAGE, SPECS[1], w, "canary", GOOD) is None  # no bucket query for it
