"""The bifrost tests hold their level at small levels on heavy-tailed and skewed A/A data.

A rollout spends 1e-5..1e-7 per test, so a test that is 10x anti-conservative there rolls good releases back.
Seeded draws; each bound is a binomial quantile at 2x the level, so only a miscalibrated test exceeds it."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np
import pytest
from scipy.stats import binom

from canary import bifrost
from canary.counts import count_test_p
from canary.dispersion import pairwise_spread_p

Draw = Callable[[np.random.Generator, int], np.ndarray]

SHAPES: dict[str, Draw] = {
    "pareto_2.5": lambda rng, n: 80 * (1 + rng.pareto(2.5, n)),
    "lognormal_0.8": lambda rng, n: rng.lognormal(math.log(100), 0.8, n),
    "outliers_5x": lambda rng, n: rng.lognormal(math.log(100), 0.25, n) * np.where(rng.random(n) < 0.02, 5.0, 1.0),
    "buckets_1ms": lambda rng, n: np.round(rng.lognormal(math.log(6), 0.25, n)),
}
SIZES = [(20, 20), (60, 60), (120, 120), (60, 120)]
DRAWS = 1500
LEVEL = 1e-3


def _bound(draws: int, level: float) -> int:
    """Counts above this are implausible (chance < 1e-6) for a test whose true rate is at most 2x its level."""
    return int(binom.ppf(1 - 1e-6, draws, 2 * level))


@pytest.mark.parametrize("name", list(SHAPES))
def test_every_up_side_test_holds_its_level_at_1e_3_on_heavy_tailed_and_skewed_samples(name: str) -> None:
    # ranks of deviations from each side's median (the old spread test) gave 15-60 of these 1,500 at 1e-3 on
    # the Pareto and log-normal 0.8 shapes: median estimation biases it under skew, more the larger the sample
    rng = np.random.default_rng(sum(map(ord, name)))
    hits = {"rank": 0, "welch": 0, "spread": 0, "tail": 0}
    draw = SHAPES[name]
    for k in range(DRAWS):
        n, m = SIZES[k % len(SIZES)]
        ev = bifrost.gather(draw(rng, m), draw(rng, n), shape_tests=("spread", "tail"))
        for test, p in (("rank", ev.p_rank_up), ("welch", ev.p_mean_up), ("spread", ev.p_spread_up),
                        ("tail", ev.p_tail_up)):
            hits[test] += p <= LEVEL
    assert max(hits.values()) <= _bound(DRAWS, LEVEL), hits


def test_the_pairwise_spread_test_holds_1e_4_on_pareto_samples_of_sixty() -> None:
    # the rollout benchmark's heavy-tailed shape at the first analysis' size: the old test rejected 0.36% of
    # A/A pairs at 1e-4 (36x); the pairwise test's count must stay within a binomial bound at 2x the level
    rng = np.random.default_rng(34)
    draws = 6000
    hits = sum(pairwise_spread_p(80 * (1 + rng.pareto(2.5, 60)), 80 * (1 + rng.pareto(2.5, 60))) <= 1e-4
               for _ in range(draws))
    assert hits <= _bound(draws, 1e-4), hits


def test_the_pairwise_spread_test_sees_a_doubled_spread_at_the_same_median() -> None:
    rng = np.random.default_rng(5)
    caught = sum(pairwise_spread_p(rng.lognormal(math.log(120), 0.5, 120), rng.lognormal(math.log(120), 0.25, 120)) <= 1e-6
                 for _ in range(100))
    assert caught >= 60, caught  # the old median-deviation test alone: 72 of these 100


def test_no_spread_evidence_when_either_side_has_no_gaps() -> None:
    assert pairwise_spread_p(np.zeros(30), np.zeros(30)) == 1.0
    assert pairwise_spread_p(np.zeros(30), np.array([0.0, 1.0] * 15)) > 0.5
    assert pairwise_spread_p(np.array([1.0]), np.arange(10.0)) == 1.0


# Zero-heavy counters (0 in 67-97% of intervals): the exact size of the up-side test, conditional on the pooled
# sample, is the chance over its equally likely splits into canary and baseline that p_up <= level; splits that
# give the same counts of each value give the same p-value, so the splits are counted by value (hypergeometric
# weights), with no sampling. Conditional size <= level for every pooled sample implies it for all i.i.d. data.

COUNT_LEVEL = 1e-5
COUNTERS: dict[str, Callable[[np.random.Generator, int], np.ndarray]] = {
    "poisson_0.1": lambda rng, n: rng.poisson(0.1, n),
    "poisson_0.4": lambda rng, n: rng.poisson(0.4, n),
    "bursty_0.1": lambda rng, n: rng.negative_binomial(0.5, 0.5 / 0.6, n),  # variance mean + 2 mean^2
    "bursty_0.4": lambda rng, n: rng.negative_binomial(0.5, 0.5 / 0.9, n),
}


def _log_choose(a: int, b: int) -> float:
    return math.lgamma(a + 1) - math.lgamma(b + 1) - math.lgamma(a - b + 1)


def _exact_size(pooled: np.ndarray, n: int, level: float) -> float:
    """P(p_up <= level) over the splits of `pooled` (counts per interval) into n canary and the rest baseline."""
    values, mult = np.unique(pooled, return_counts=True)
    total = _log_choose(len(pooled), n)
    size = 0.0
    for taken in itertools.product(*(range(min(int(k), n) + 1) for k in mult[1:])):
        counts = np.array((n - sum(taken), *taken))
        if not 0 <= counts[0] <= mult[0]:
            continue
        prob = math.exp(sum(_log_choose(int(k), int(c)) for k, c in zip(mult, counts)) - total)
        canary, baseline = np.repeat(values, counts) / 2000, np.repeat(values, mult - counts) / 2000
        if prob < level * 1e-6 or canary.mean() <= baseline.mean():  # negligible, or no up-side evidence
            continue
        size += prob * (bifrost.gather(baseline, canary, shape_tests=()).p_up <= level)
    return size


@pytest.mark.parametrize("name", list(COUNTERS))
def test_the_up_side_test_holds_1e_5_exactly_on_zero_heavy_counters(name: str) -> None:
    # the rank and Welch tests' normal approximations alone: up to 25x the level at 1e-6 on a Poisson 0.1 counter
    # with twice the canary intervals, 2-8x at 1e-5..1e-6 at 0.4 per interval; the exact count test bounds both
    rng = np.random.default_rng(sum(map(ord, name)))
    sizes = []
    for n, m in ((60, 60), (120, 60), (60, 120)):
        countable = (p for p in (COUNTERS[name](rng, n + m) for _ in range(12))  # a rare burst has too many splits
                     if math.prod(min(int(k), n) + 1 for k in np.unique(p, return_counts=True)[1][1:]) <= 3000)
        sizes += [(n, m, _exact_size(next(countable), n, COUNT_LEVEL) / COUNT_LEVEL) for _ in range(2)]
    assert max(s for *_, s in sizes) <= 1 + 1e-6, sizes


def test_the_count_test_is_the_exact_permutation_p_value() -> None:
    rng = np.random.default_rng(3)
    for _ in range(60):
        n, m = int(rng.integers(2, 7)), int(rng.integers(2, 7))
        c, b = rng.poisson(0.4, n) / 2000, rng.poisson(0.4, m) / 2000
        p = count_test_p(c, b, 1 / 2000)
        pooled = np.concatenate([c, b])
        if p is None:
            assert (pooled > 0).mean() > 0.5 or not pooled.any()  # only zero-heavy data with some counts
            continue
        splits = [pooled[list(i)].sum() for i in itertools.combinations(range(n + m), n)]
        assert p == pytest.approx(np.mean(np.array(splits) >= c.sum() - 1e-12), abs=1e-12)


def test_a_doubled_zero_heavy_error_rate_is_still_caught() -> None:
    # 0.4 -> 0.8 errors per interval over two hours of one-minute intervals, at a rollout's per-test level
    rng = np.random.default_rng(12)
    caught = sum(bifrost.gather(rng.poisson(0.4, 120) / 2000, rng.poisson(0.8, 120) / 2000, shape_tests=()).p_up <= 1e-4
                 for _ in range(200))
    assert caught >= 90, caught  # 104 of 200; the rank and Welch tests alone: 110


# the bucket tail test (canary.bucket_tail) on A/A arms: intervals that differ, uneven and low volume, skew, outlier
# intervals, and coarse buckets whose edges tie many requests (Prometheus' defaults, in ms)
PROM_LE = [5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0]
BUCKET_SHAPES: dict[str, dict[str, object]] = {
    "jitter_0.2": {"jitter": 0.2},
    "uneven_600_vs_60": {"jitter": 0.1, "canary_volume": 60},
    "low_volume_20": {"jitter": 0.1, "volume": 20},
    "skewed_sigma_0.8": {"jitter": 0.1, "sigma": 0.8},
    "outlier_intervals": {"jitter": 0.05, "outliers": 0.02},
    "prometheus_default_buckets": {"jitter": 0.1, "le": PROM_LE},
}


@pytest.mark.parametrize("name", list(BUCKET_SHAPES))
def test_the_bucket_tail_test_holds_its_level_at_1e_3_on_a_a_arms(name: str) -> None:
    from canary.bucket_tail import bucket_tail_test
    from tests.canary.buckets import buckets

    kw = dict(BUCKET_SHAPES[name])
    volume, canary_volume = int(kw.pop("volume", 600)), kw.pop("canary_volume", None)  # type: ignore[call-overload]
    rng = np.random.default_rng(sorted(BUCKET_SHAPES).index(name))
    rejected = 0
    for _ in range(DRAWS):
        base = buckets(rng, 60, volume, **kw)  # type: ignore[arg-type]
        can = buckets(rng, 60, int(canary_volume or volume), **kw)  # type: ignore[arg-type]
        tail = bucket_tail_test(can, base)
        rejected += tail is not None and tail.p <= LEVEL
    assert rejected <= _bound(DRAWS, LEVEL), f"{name}: {rejected} of {DRAWS} at {LEVEL}"
