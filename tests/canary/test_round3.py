"""Issue 32: ties and zeros, no dilution by metric count, a practical tolerance, and an upper-tail test.

Each test asserts a property the judge lacked before (see the issue); statistical ones use fixed seeds."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.special import ndtri
from scipy.stats import rankdata

from canary import bifrost, shape
from canary.config import JudgeConfig, MetricSamples, MetricSpec, StagePlace
from canary.judge import classify, judge, soak_look
from canary.report import render_html
from canary.sequential import decide

FIRST = StagePlace(index=0, stages=6)


def _quantiles(n: int, factor: float = 1.0, *, raise_from: float = 1.0, raise_to: float = 1.0) -> list[float]:
    """n evenly spread log-normal quantiles (median 100, sigma 0.25) times `factor`; quantiles above `raise_from`
    raised linearly up to 1.5x at `raise_to` (a tail-only change), in a fixed shuffled order."""
    u = (np.arange(n) + 0.5) / n
    q = 100 * np.exp(0.25 * ndtri(u)) * factor
    if raise_from < 1:
        q = q * (1 + 0.5 * np.clip((u - raise_from) / (raise_to - raise_from), 0, 1))
    return q[np.random.default_rng(0).permutation(n)].tolist()


def test_an_all_zero_arm_against_a_few_equal_counts_is_no_spread_evidence_and_no_infinite_ratio() -> None:
    # the soak window: baseline all 0, half the canary's intervals one error in 2,000 requests. The
    # Brown-Forsythe t-test saw zero variance on both sides (every deviation from the mid-median equal): p=1e-142
    zeros, half = np.zeros(10), np.array([0.0] * 5 + [0.0005] * 5)
    ev = bifrost.gather(zeros, half)
    assert ev.p_spread_up > 1e-3 and math.isfinite(ev.spread_ratio) and math.isfinite(ev.ratio)
    assert ev.p_up > 1e-3
    spec = MetricSpec(name="retries")
    result = bifrost.decide(spec, ev, 1e-4)
    assert result.classification == "Pass" and "inf" not in result.reason and "vs 0 (" in result.reason


@pytest.mark.parametrize("distinct", [2, 3, 5])
def test_spread_and_tail_tests_hold_their_level_on_tied_and_zero_heavy_samples(distinct: int) -> None:
    # many small windows of counts with a handful of values, 3,000 A/A comparisons: p-values near their level
    rng = np.random.default_rng(distinct)
    small = {1e-2: 0, 1e-3: 0}  # how many of the 6,000 p-values fall at or below each level
    for _ in range(3000):
        w = int(rng.choice([10, 20, 40]))
        probs = np.array([0.8] + [0.2 / (distinct - 1)] * (distinct - 1))
        b, c = rng.choice(distinct, w, p=probs) / 2000, rng.choice(distinct, w, p=probs) / 2000
        ev = bifrost.gather(b, c, shape_tests=("spread", "tail"))
        for level in small:
            small[level] += (ev.p_spread_up <= level) + (ev.p_tail_up <= level)
        assert math.isfinite(ev.ratio) and math.isfinite(ev.spread_ratio) and math.isfinite(ev.tail_ratio)
    assert small[1e-2] <= 2 * 60 and small[1e-3] <= 3 * 6, small  # at most 2-3x the nominal rate (60, 6)


def test_the_tail_test_is_the_exact_permutation_p_value_with_ties() -> None:
    old, below = shape.TAIL_FROM, shape.EXACT_BELOW
    shape.TAIL_FROM, shape.EXACT_BELOW = 0.6, 1.0  # a wide tail so small samples have several scored items; always exact
    try:
        rng = np.random.default_rng(3)
        for _ in range(4):
            vals = np.round(rng.normal(0, 1, 13) * 3)  # ties
            c, b = vals[:6], vals[6:]
            ranks = rankdata(vals)
            scores = np.maximum(0, 2 * ranks - 2 * math.floor(0.6 * 14))
            hits = [scores[list(comb)].sum() >= scores[:6].sum() - 1e-9 for comb in itertools.combinations(range(13), 6)]
            assert shape.tail_test(c, b) == pytest.approx(sum(hits) / len(hits), rel=1e-9)
    finally:
        shape.TAIL_FROM, shape.EXACT_BELOW = old, below


@pytest.mark.parametrize("count", [2, 10, 20, 50])
def test_one_regressed_metric_fails_the_analysis_however_many_metrics_are_fine(count: int) -> None:
    specs = [MetricSpec(name=f"latency_{i}", kind="latency") for i in range(count)]
    data = [MetricSamples(name=s.name, baseline=_quantiles(120), canary=_quantiles(120, 1.4 if i == 0 else 1.0))
            for i, s in enumerate(specs)]
    d = decide(JudgeConfig(), specs, data, place=FIRST)
    assert d.result.metrics[0].classification == "High"
    assert d.action == "fail" and d.result.verdict == "fail", d.reason
    assert d.result.score == pytest.approx(100 * (count - 1) / count, abs=0.01)  # the score is kept, for display
    look = soak_look(JudgeConfig(), specs, data, look=12, max_looks=12, place=FIRST)
    assert look.alarm


def test_group_weights_shape_the_score_but_do_not_dilute_a_regression() -> None:
    specs = [MetricSpec(name=f"m{i}", groups=["g"]) for i in range(20)]
    data = [MetricSamples(name=s.name, baseline=_quantiles(120), canary=_quantiles(120, 1.4 if i == 0 else 1.0))
            for i, s in enumerate(specs)]
    weighted = judge(JudgeConfig(groups={"g": 100}), specs, data)
    assert weighted.score == 95.0 and weighted.verdict == "fail"  # a score Kayenta would pass; bifrost mode fails
    assert judge(JudgeConfig(), specs, data).verdict == "fail"
    assert judge(JudgeConfig(mode="kayenta", groups={"g": 100}), specs, data).verdict == "pass"


def test_a_shift_inside_the_tolerance_is_no_regression_however_significant() -> None:
    # +5% on 100 seeded analyses at a loose alpha: with a 10% tolerance (an equivalence margin) it is no evidence;
    # the effect gate alone (no tolerance) lets the noisy point estimate through in about half of them
    spec = MetricSpec(name="latency", kind="latency")
    rng = np.random.default_rng(32)
    flagged = {0.0: 0, 0.1: 0}
    for _ in range(100):
        b, c = rng.lognormal(math.log(100), 0.25, 60), rng.lognormal(math.log(105), 0.25, 60)
        data = MetricSamples(name="latency", baseline=b.tolist(), canary=c.tolist())
        for tol in flagged:
            r = judge(JudgeConfig(alpha=0.2, tolerance={"latency": tol}), [spec], [data]).metrics[0]
            flagged[tol] += r.classification == "High"
    assert flagged[0.1] <= 10 and flagged[0.0] >= 30, flagged
    big = MetricSamples(name="latency", baseline=_quantiles(60), canary=_quantiles(60, 1.3))
    r = judge(JudgeConfig(tolerance={"latency": 0.1}), [spec], [big]).metrics[0]
    assert r.classification == "High" and r.tolerance == 0.1 and "10% tolerance" in r.reason


def test_the_report_shows_the_tolerance() -> None:
    spec = MetricSpec(name="latency", kind="latency")
    data = [MetricSamples(name="latency", baseline=_quantiles(60), canary=_quantiles(60, 1.02))]
    result = judge(JudgeConfig(), [spec], data)
    assert result.metrics[0].tolerance == 0.03
    page = render_html(result, [spec], data, title="t")
    assert "<th>tolerance</th>" in page and "±3%" in page


def test_a_tail_only_regression_is_caught_by_the_tail_test() -> None:
    spec = MetricSpec(name="latency", kind="latency")
    base = _quantiles(240)  # the upper fifth raised, up to 1.5x from the 95th percentile; median and 80% unchanged
    tail = MetricSamples(name="latency", baseline=base, canary=_quantiles(240, raise_from=0.8, raise_to=0.95))
    r = classify(spec, tail, 20, alpha=1e-4)
    assert r.classification == "High" and "heavier upper tail" in r.reason, r.reason
    assert r.tests["tail_up"] < 1e-4 and min(r.tests["mann_whitney_up"], r.tests["welch_up"]) > 1e-3
    same = MetricSamples(name="latency", baseline=base, canary=_quantiles(240))
    assert classify(spec, same, 20, alpha=1e-4).classification == "Pass"
    other = MetricSpec(name="latency")  # kind 'other': no tail test
    assert "tail_up" not in classify(other, tail, 20, alpha=1e-4).tests


def test_an_error_rate_over_fewer_canary_requests_is_not_a_spread_regression() -> None:
    # uneven volume: the canary's rate over 400 requests per interval spreads wider than the baseline's over 2,000
    # at the same mean; a rate's spread follows its mean and volume, so error rates take no spread test
    rng = np.random.default_rng(5)
    flagged = {"error_rate": 0, "other": 0}
    for _ in range(100):
        b, c = rng.binomial(2000, 0.002, 60) / 2000, rng.binomial(400, 0.002, 60) / 400
        for kind in flagged:
            spec = MetricSpec(name="errors", kind=kind)  # type: ignore[arg-type]
            data = MetricSamples(name="errors", baseline=b.tolist(), canary=c.tolist())
            flagged[kind] += judge(JudgeConfig(), [spec], [data]).metrics[0].classification != "Pass"
    assert flagged["error_rate"] <= 3 and flagged["other"] >= 20, flagged
