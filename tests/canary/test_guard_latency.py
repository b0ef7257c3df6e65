"""The region guard's latency from histogram buckets: every request counts once, so a low-volume region's p99 is
judged on its real sample size (no 100-request floor), and a look with too few requests says how many it needs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError
from scipy.special import ndtr

from canary.config import MetricSpec
from canary.guard import GuardJudge, RegionLook, RegionSamples, look_fleet
from canary.guard_counts import Histogram, Pooled, requests_to_tell

SPECS = [MetricSpec(name="latency_p99", kind="latency", allowed_increase=1.2),
         MetricSpec(name="error_rate", kind="error_rate", critical=True, allowed_increase=1.5)]
LE = [round(10 * 2 ** (k / 4), 3) for k in range(45)]


def buckets(rng: np.random.Generator, req: np.ndarray, factor: float) -> list[list[float]]:
    """Each interval's requests counted into LE buckets, latencies log-normal (median about 110 ms, sigma 0.5)."""
    cdf = ndtr((np.log(np.array(LE)) - (math.log(120 * factor) - 0.125)) / 0.5)
    probs = np.diff(np.concatenate([[0.0], cdf, [1.0]]))
    return [rng.multinomial(int(n), probs).astype(float).tolist() for n in req]


def region(rng: np.random.Generator, name: str, *, requests: float, factor: float = 1.0, n: int = 40,
           days: int = 7, hist: bool = True) -> RegionSamples:
    """`requests` per interval; `factor` x the latency now (its history as usual). A p99 per interval as well."""
    def draw(f: float) -> RegionSamples:
        req = rng.poisson(requests, n)
        p99 = rng.lognormal(math.log(340 * f), 0.1, n)  # a p99 query's values (judged only without buckets)
        out = RegionSamples(region=name, requests=req.astype(float).tolist(),
                            metrics={"latency_p99": p99.tolist(), "error_rate": [0.0] * n})
        if hist:
            out.histograms = {"latency_p99": Histogram(le=LE, counts=buckets(rng, req, f))}
        return out
    return draw(factor).model_copy(update={"history": [draw(1.0) for _ in range(days)]})


def looks(regions: list[RegionSamples]) -> dict[str, RegionLook]:
    return {x.region: x for x in look_fleet(GuardJudge(), SPECS, regions, [], look=1)}


def test_a_low_volume_regions_latency_rise_is_sick_from_its_buckets() -> None:
    """40 requests per interval: every interval is under the p99's 100-request floor, so without buckets the
    latency is never judged; with them, 1,600 requests show a 1.5x p99 against peers and history."""
    rng = np.random.default_rng(11)
    got = looks([region(rng, "a", requests=40, factor=1.5), region(rng, "b", requests=400),
                 region(rng, "c", requests=400)])
    a = got["a"]
    assert a.unhealthy and a.degraded, a.summary
    assert "latency_p99" in a.reasons[0] and "buckets of" in a.reasons[0]
    assert not got["b"].unhealthy and not got["c"].unhealthy


def test_without_buckets_the_floor_still_applies() -> None:
    """A plain p99 query keeps working: the same region without buckets is judged on intervals of >= 100 requests
    only, so at 40 a interval its latency is not enough data (never sick on 40-request p99s)."""
    rng = np.random.default_rng(11)
    got = looks([region(rng, "a", requests=40, factor=1.5, hist=False), region(rng, "b", requests=400, hist=False),
                 region(rng, "c", requests=400, hist=False)])
    assert not got["a"].unhealthy
    assert "intervals of at least 100 requests" in got["a"].summary


def test_healthy_low_volume_latency_is_judged_healthy_not_skipped() -> None:
    rng = np.random.default_rng(12)
    for seed in range(20):
        got = looks([region(rng, r, requests=v) for r, v in (("a", 20), ("b", 300), ("c", 150))])
        assert not any(x.unhealthy for x in got.values()), (seed, [x.summary for x in got.values()])
    assert "latency_p99" in got["a"].summary and "buckets of" in got["a"].summary


def test_too_few_requests_is_no_data_and_says_how_many_it_needs() -> None:
    rng = np.random.default_rng(13)
    got = looks([region(rng, "a", requests=2, factor=1.5), region(rng, "b", requests=400)])
    a = got["a"]
    need = requests_to_tell(GuardJudge().look_level() / 2, 0.01)
    assert not a.unhealthy and a.no_data, a.summary
    assert f"needs about {need}" in a.summary
    assert 100 < need < 2000  # about 400 at 5e-5 a metric: a few minutes of a quiet night


def test_regions_with_different_buckets_fall_back_to_the_floor() -> None:
    rng = np.random.default_rng(14)
    a = region(rng, "a", requests=400)
    b = region(rng, "b", requests=400)
    b.histograms = {"latency_p99": Histogram(le=LE[:-1], counts=[row[:-2] + [row[-2] + row[-1]]
                                                                 for row in b.histograms["latency_p99"].counts])}
    got = looks([a, b])
    assert "(40 vs 40 intervals)" in got["a"].summary and "buckets of" not in got["a"].summary


def test_the_pooled_quantile_interpolates_like_histogram_quantile() -> None:
    p = Pooled((100.0, 200.0, 400.0), np.array([50.0, 40.0, 10.0, 0.0]), 0.99)
    assert p.value() == pytest.approx(200 + 200 * (99 - 90) / 10)
    assert p.value(0.5) == pytest.approx(100.0)
    assert Pooled((100.0,), np.array([0.0, 5.0]), 0.99).value() == 100.0  # above the last bound: the last bound


@pytest.mark.parametrize(("fields", "where"), [
    ({"le": [100, 50], "counts": []}, "le"),
    ({"le": [0, 50], "counts": []}, "le"),
    ({"le": [50, 100], "counts": [[1, 2]]}, "counts[0]"),
    ({"le": [50, 100], "counts": [[1, 2, -1]]}, "counts[0]"),
    ({"le": [50, 100], "quantile": 1.5}, "quantile"),
])
def test_a_bad_histogram_is_refused_naming_the_field(fields: dict[str, object], where: str) -> None:
    with pytest.raises(ValidationError) as err:
        Histogram.model_validate(fields)
    assert where in str(err.value)


def test_requests_above_a_line_inside_a_bucket_are_spread_on_a_log_scale() -> None:
    """Latency densities fall inside a bucket: spread linearly, a region at exactly the gate was found worse at
    2.7x the test's level (60,000 requests, buckets 1.19x apart); on a log scale, at about the level."""
    p = Pooled((100.0, 200.0, 400.0), np.array([10.0, 100.0, 7.0, 3.0]), 0.99)
    assert p.above(100 * math.sqrt(2)) == pytest.approx(50 + 7 + 3)
    assert p.above(50.0) == pytest.approx(5 + 110)  # the first bucket (from 0): linear
    assert p.above(400.0) == 3.0 and p.above(500.0) == 0.0
