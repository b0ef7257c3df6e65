"""The judge's tail test on latency buckets: a tail-only regression is caught from every request's bucket, A/A
arms whose intervals differ are not rejected, and buckets that cannot be compared are refused naming the field."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError
from scipy import stats

from canary.bucket_tail import bucket_tail_test
from canary.config import JudgeConfig, MetricSamples, MetricSpec, StagePlace
from canary.histogram import Histogram
from canary.sequential import decide
from tests.canary.buckets import buckets

SPEC = MetricSpec(name="latency_p99", kind="latency")
PLACE = StagePlace(index=0, stages=6)  # the first stage of six: the smallest share of the rollout's budget


def interval_p99s(rng: np.random.Generator, n: int, raised: bool) -> list[float]:
    """Per-interval p99 summaries barely moved by a tail-only change (what the judge had without buckets)."""
    return (rng.lognormal(math.log(180), 0.1, n) * (1.02 if raised else 1.0)).tolist()


def samples(rng: np.random.Generator, *, raised: bool, with_buckets: bool, jitter: float = 0.1) -> MetricSamples:
    start = 0.95 if raised else None
    extra = {"baseline_buckets": buckets(rng, 60, 600, jitter=jitter),
             "canary_buckets": buckets(rng, 60, 600, jitter=jitter, start=start)} if with_buckets else {}
    return MetricSamples(name=SPEC.name, baseline=interval_p99s(rng, 60, False), canary=interval_p99s(rng, 60, raised),
                         **extra)


def test_a_tail_only_regression_is_caught_from_the_buckets_and_missed_without_them() -> None:
    # quantiles above p95 raised, 1.5x from p99, the median unchanged
    rng = np.random.default_rng(7)
    with_b = decide(JudgeConfig(), [SPEC], [samples(rng, raised=True, with_buckets=True)], place=PLACE)
    rng = np.random.default_rng(7)
    without = decide(JudgeConfig(), [SPEC], [samples(rng, raised=True, with_buckets=False)], place=PLACE)
    assert with_b.action == "fail", with_b.reason
    reason = with_b.result.metrics[0].reason
    assert "heavier upper tail" in reason and "of canary requests above" in reason and "n 36000 vs 36000" in reason
    assert "buckets_tail_up" in with_b.result.metrics[0].tests
    assert without.action != "fail", without.reason


def test_a_tail_inside_the_tolerance_is_no_regression() -> None:
    rng = np.random.default_rng(3)
    base, can = buckets(rng, 60, 2000, jitter=0.0), buckets(rng, 60, 2000, jitter=0.0, median=102.0)  # +2% < 3%
    tail = bucket_tail_test(can, base, tolerance=0.03)
    assert tail is not None and tail.p > 0.01
    plain = bucket_tail_test(can, base, tolerance=0.0)
    assert plain is not None and plain.p < tail.p  # the margin, not the data, keeps it a pass


def test_a_b_test_with_overdispersed_intervals_is_not_rejected() -> None:
    # intervals differ (each one's latency x exp(N(0, 0.2))): a binomial test over requests rejects most of these
    rng = np.random.default_rng(11)
    failed, binomial_rejects = 0, 0
    for _ in range(60):
        data = samples(rng, raised=False, with_buckets=True, jitter=0.2)
        d = decide(JudgeConfig(), [SPEC], [data], place=PLACE)
        failed += d.action == "fail"
        assert data.baseline_buckets is not None and data.canary_buckets is not None
        b, c = data.baseline_buckets.rows(), data.canary_buckets.rows()
        k_c, k_b = c[:, 15:].sum(), b[:, 15:].sum()  # requests above 128 ms (about the p84)
        binomial_rejects += float(stats.binom.sf(k_c - 1, k_c + k_b, 0.5)) <= 1e-3
    assert failed == 0
    assert binomial_rejects >= 10  # the data are overdispersed enough to fool a per-request test


def test_without_buckets_the_judgement_is_unchanged() -> None:
    rng = np.random.default_rng(5)
    plain = samples(rng, raised=False, with_buckets=False)
    result = decide(JudgeConfig(), [SPEC], [plain], place=PLACE).result.metrics[0]
    assert "buckets_tail_up" not in result.tests and "tail_up" in result.tests


def test_too_few_requests_give_no_bucket_evidence() -> None:
    rng = np.random.default_rng(2)
    assert bucket_tail_test(buckets(rng, 3, 10), buckets(rng, 3, 10)) is None  # not 5 expected above the p90 edge


@pytest.mark.parametrize(("extra", "field"), [
    ({"baseline_buckets": {"le": [100, 200], "counts": [[1, 2, 3]]}}, "canary_buckets: needed"),
    ({"baseline_buckets": {"le": [100, 200], "counts": [[1, 2, 3]]},
      "canary_buckets": {"le": [100, 300], "counts": [[1, 2, 3]]}}, "canary_buckets.le"),
    ({"baseline_buckets": {"le": [100, 200], "counts": [[1, 2]]},
      "canary_buckets": {"le": [100, 200], "counts": []}}, "counts[0]"),
    ({"baseline_buckets": {"le": [200, 100], "counts": []},
      "canary_buckets": {"le": [200, 100], "counts": []}}, "le: bucket bounds"),
])
def test_buckets_that_cannot_be_compared_are_refused_naming_the_field(extra: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as err:
        MetricSamples(name="latency_p99", baseline=[1.0], canary=[1.0], **extra)  # type: ignore[arg-type]
    assert field in str(err.value)


def test_the_bucket_model_is_the_guards() -> None:
    from canary import guard_counts

    assert guard_counts.Histogram is Histogram
