"""Bifrost mode: what it catches that Kayenta passes, how it handles missing data, and its explanations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from canary import kayenta
from canary.bifrost import holm, simes
from canary.config import JudgeConfig, MetricSamples, MetricSpec, Thresholds
from canary.judge import classify, judge

STEP_BASELINE = [1.0] * 10
STEP_CANARY = [1.0] * 3 + [100.0] * 7  # the issue's example: 7 of 10 canary points at 100


def samples(name: str, baseline: np.ndarray | list[float], canary: np.ndarray | list[float]) -> MetricSamples:
    return MetricSamples(name=name, baseline=list(map(float, baseline)), canary=list(map(float, canary)))


def test_issue_example_passes_kayenta_but_not_bifrost() -> None:
    spec = MetricSpec(name="latency")
    data = [samples("latency", STEP_BASELINE, STEP_CANARY)]
    kay = judge(JudgeConfig(mode="kayenta"), [spec], data)
    assert kay.verdict == "pass" and kay.metrics[0].classification == "Pass"
    assert "dead zone" in kay.metrics[0].reason
    # bifrost with the analysis' minimum lowered to the 10 points available: a regression
    small = judge(JudgeConfig(min_samples=10), [spec], data)
    assert small.verdict == "fail" and small.metrics[0].classification == "High"
    # with the default minimum of 20 samples per side: an explicit 'insufficient data', never a pass
    default = judge(JudgeConfig(), [spec], data)
    assert default.verdict == "insufficient_data"
    assert "need 20 per side" in default.metrics[0].reason


def test_bimodal_slow_mode_is_caught_in_bifrost_mode_and_mostly_missed_by_kayenta() -> None:
    """A quarter of the canary's intervals are twice as slow; the rest match the baseline."""
    spec = MetricSpec(name="latency_p50")
    caught = {"bifrost": 0, "kayenta": 0}
    runs = 40
    for seed in range(runs):
        rng = np.random.default_rng(seed)
        base = rng.lognormal(np.log(120), 0.1, 60)
        can = rng.lognormal(np.log(120), 0.1, 60)
        can = np.where(rng.random(60) < 0.25, can * 2, can)
        for mode in caught:
            r = classify(spec, samples("latency_p50", base, can), 20, mode=mode)
            caught[mode] += r.classification == "High"
    assert caught["bifrost"] >= 0.6 * runs
    assert caught["kayenta"] <= 0.45 * runs
    assert caught["bifrost"] > caught["kayenta"] + 10


def test_sparse_error_metric_regression_is_caught_where_kayenta_is_blind() -> None:
    """An error counter that is 0 in ~98% of intervals (0.02 errors/interval) rising ten-fold."""
    spec = MetricSpec(name="errors", kind="error_rate")
    caught = {"bifrost": 0, "kayenta": 0}
    runs = 40
    for seed in range(runs):
        rng = np.random.default_rng(seed)
        base = rng.binomial(1000, 0.02 / 1000, 60) / 1000
        can = rng.binomial(1000, 0.2 / 1000, 60) / 1000
        for mode in caught:
            caught[mode] += classify(spec, samples("errors", base, can), 20, mode=mode).classification == "High"
    assert caught["bifrost"] >= 0.5 * runs
    assert caught["kayenta"] <= 0.25 * runs


@pytest.mark.parametrize("errors_per_interval", [0.05, 0.5, 4.0])
def test_sparse_error_metric_without_change_rarely_flags(errors_per_interval: float) -> None:
    """A/A on zero-heavy counts: at a 1% level, 300 seeded analyses flag at most a handful."""
    spec = MetricSpec(name="errors", kind="error_rate")
    flagged = 0
    for seed in range(300):
        rng = np.random.default_rng(1000 + seed)
        base = rng.binomial(2000, errors_per_interval / 2000, 60) / 2000
        can = rng.binomial(2000, errors_per_interval / 2000, 60) / 2000
        flagged += classify(spec, samples("errors", base, can), 20).classification != "Pass"
    assert flagged <= 8  # P(more than 8 of 300 | rate 1%) < 0.001


def test_kayenta_inverted_interval_artifact_does_not_occur_in_bifrost_mode() -> None:
    """Kayenta's zero-inflated 'Large Input' vector gives lower > upper; bifrost's interval is ordered."""
    import json
    from pathlib import Path

    vectors = json.loads((Path(__file__).parent / "data" / "kayenta_vectors.json").read_text())["vectors"]
    v = next(v for v in vectors if v["name"] == "Mann-Whitney Classifier Test: High Metric (Large Input)")
    kay = kayenta.mann_whitney_interval(np.array(v["experiment"]), np.array(v["control"]), 0.95)
    assert kay.lower > kay.upper  # the 95% interval of Kayenta's unit test comes out inverted
    bif = classify(MetricSpec(name="m", direction="either"), samples("m", v["control"], v["experiment"]), 20)
    assert bif.interval is not None and bif.interval[0] <= bif.estimate <= bif.interval[1]  # type: ignore[operator]
    assert bif.interval_level == 0.95


def test_a_ten_metric_aa_analysis_rarely_fails() -> None:
    """Holm keeps the family-wise false-alarm rate at 1%: 200 seeded A/A analyses, at most 6 not passing."""
    specs = [MetricSpec(name=f"m{i}") for i in range(10)]
    not_pass = 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        data = [samples(f"m{i}", rng.lognormal(0, 0.25, 60), rng.lognormal(0, 0.25, 60)) for i in range(10)]
        not_pass += judge(JudgeConfig(), specs, data).verdict != "pass"
    assert not_pass <= 6  # P(more than 6 of 200 | rate 1%) < 0.005


def test_latency_regression_of_twenty_percent_is_detected() -> None:
    specs = [MetricSpec(name="p50", kind="latency"), MetricSpec(name="cpu")]
    caught = 0
    for seed in range(50):
        rng = np.random.default_rng(seed)
        data = [
            samples("p50", rng.lognormal(np.log(120), 0.15, 60), rng.lognormal(np.log(144), 0.15, 60)),
            samples("cpu", rng.normal(0.5, 0.03, 60), rng.normal(0.5, 0.03, 60)),
        ]
        r = judge(JudgeConfig(), specs, data)
        caught += r.verdict != "pass" and r.metrics[0].classification == "High"
    assert caught >= 48


def test_significant_but_small_changes_pass_the_effect_gate() -> None:
    rng = np.random.default_rng(3)
    base, can = rng.lognormal(0, 0.1, 10_000), rng.lognormal(np.log(1.02), 0.1, 10_000)
    loose = classify(MetricSpec(name="m"), samples("m", base, can), 20)
    assert loose.classification == "Pass" and loose.p_value is not None and loose.p_value < 1e-6
    assert "significant but small" in loose.reason
    strict = classify(MetricSpec(name="m", allowed_increase=1.01), samples("m", base, can), 20)
    assert strict.classification == "High"


def test_direction_decides_which_change_is_harmful() -> None:
    rng = np.random.default_rng(4)
    base, can = rng.normal(100, 3, 60), rng.normal(80, 3, 60)
    assert classify(MetricSpec(name="m", direction="increase"), samples("m", base, can), 20).classification == "Pass"
    assert classify(MetricSpec(name="m", direction="decrease"), samples("m", base, can), 20).classification == "Low"
    assert classify(MetricSpec(name="m", direction="either"), samples("m", base, can), 20).classification == "Low"
    assert classify(MetricSpec(name="m", direction="decrease"), samples("m", can, base), 20).classification == "Pass"


def test_cles_effect_measure_and_thresholds() -> None:
    rng = np.random.default_rng(5)
    base, can = rng.normal(100, 10, 200), rng.normal(104, 10, 200)  # CLES ~ 0.61
    spec = MetricSpec(name="m", effect_size="cles")
    r = classify(spec, samples("m", base, can), 20)
    assert r.classification == "High" and r.effect_measure == "cles" and 0.55 < r.effect_size < 0.7  # type: ignore[operator]
    gated = classify(MetricSpec(name="m", effect_size="cles", allowed_increase=0.75), samples("m", base, can), 20)
    assert gated.classification == "Pass"


def test_critical_metric_regression_fails_the_analysis_with_score_zero() -> None:
    rng = np.random.default_rng(6)
    specs = [MetricSpec(name=f"m{i}") for i in range(5)] + [MetricSpec(name="errors", critical=True)]
    data = [samples(f"m{i}", rng.normal(1, 0.05, 60), rng.normal(1, 0.05, 60)) for i in range(5)]
    data.append(samples("errors", rng.binomial(2000, 0.005, 60) / 2000, rng.binomial(2000, 0.01, 60) / 2000))
    r = judge(JudgeConfig(), specs, data)
    assert r.verdict == "fail" and r.score == 0.0
    assert r.metrics[-1].critical and "critical" in r.summary
    # a critical threshold above the observed 2x ratio keeps it an ordinary High
    specs[-1] = MetricSpec(name="errors", critical=True, critical_increase=3.0)
    r2 = judge(JudgeConfig(), specs, data)
    assert r2.metrics[-1].classification == "High" and not r2.metrics[-1].critical and r2.score > 0


def test_insufficient_data_is_explicit_and_evidence_outranks_it() -> None:
    rng = np.random.default_rng(7)
    specs = [MetricSpec(name="lat"), MetricSpec(name="cpu")]
    healthy = samples("lat", rng.normal(1, 0.05, 60), rng.normal(1, 0.05, 60))
    short = samples("cpu", rng.normal(1, 0.05, 60), rng.normal(1, 0.05, 12))
    r = judge(JudgeConfig(), specs, [healthy, short])
    assert r.verdict == "insufficient_data"
    assert r.metrics[1].classification == "Nodata" and r.metrics[1].canary_n == 12
    assert "12 canary" in r.summary
    # a metric with no data at all, and a judge call with no data for any metric
    missing = judge(JudgeConfig(), specs, [healthy])
    assert missing.verdict == "insufficient_data"
    assert judge(JudgeConfig(), specs, []).verdict == "insufficient_data"
    # a detected regression is reported as such even when another metric lacks data
    slow = samples("lat", rng.normal(1, 0.05, 60), rng.normal(1.3, 0.05, 60))
    assert judge(JudgeConfig(), specs, [slow, short]).verdict in ("fail", "marginal")


def test_must_have_data_counts_as_a_failure() -> None:
    rng = np.random.default_rng(8)
    specs = [MetricSpec(name="lat"), MetricSpec(name="errors", must_have_data=True)]
    data = [samples("lat", rng.normal(1, 0.05, 60), rng.normal(1, 0.05, 60))]
    r = judge(JudgeConfig(), specs, data)
    assert r.metrics[1].classification == "NodataFailMetric"
    assert r.verdict == "fail" and r.score == 50.0


def test_muted_metrics_are_reported_but_not_scored() -> None:
    rng = np.random.default_rng(9)
    specs = [MetricSpec(name="lat"), MetricSpec(name="noisy", muted=True)]
    data = [
        samples("lat", rng.normal(1, 0.05, 60), rng.normal(1, 0.05, 60)),
        samples("noisy", rng.normal(1, 0.05, 60), rng.normal(2, 0.05, 60)),
    ]
    r = judge(JudgeConfig(), specs, data)
    assert r.metrics[1].classification == "High" and r.metrics[1].muted
    assert r.verdict == "pass" and r.score == 100.0


def test_nan_policy_and_outlier_removal() -> None:
    base = [1.0, 2.0, 3.0, 4.0, 5.0] * 6
    can = [1.0, 2.0, 3.0, 4.0, 5.0] * 6 + [math.nan] * 30
    removed = classify(MetricSpec(name="m"), samples("m", base, can), 20)
    assert removed.canary_n == 30 and removed.classification == "Pass"
    replaced = classify(MetricSpec(name="m", direction="decrease", nan_strategy="replace"), samples("m", base, can), 20)
    assert replaced.canary_n == 60 and replaced.classification == "Low"  # half the canary became 0.0
    rng = np.random.default_rng(10)
    b = rng.normal(100, 2, 60)
    c = np.concatenate([rng.normal(100, 2, 59), [5000.0]])  # one wild outlier (fences never inside P1..P99)
    kept = classify(MetricSpec(name="m"), samples("m", b, c), 20)
    dropped = classify(MetricSpec(name="m", outliers="remove"), samples("m", b, c), 20)
    assert kept.canary_n == 60 and dropped.canary_n == 59
    assert kept.canary_mean > 180 and dropped.canary_mean < 101  # type: ignore[operator]
    assert kept.classification == dropped.classification == "Pass"  # one outlier is not a regression


def test_infinite_values_are_an_error_not_a_pass() -> None:
    specs = [MetricSpec(name="m")]
    r = judge(JudgeConfig(), specs, [samples("m", [1.0] * 30, [1.0] * 29 + [math.inf])])
    assert r.metrics[0].classification == "Error" and r.verdict == "insufficient_data"


def test_every_judged_metric_carries_its_explanation() -> None:
    rng = np.random.default_rng(11)
    specs = [MetricSpec(name="a"), MetricSpec(name="b", direction="either"), MetricSpec(name="c", effect_size="cles")]
    data = [samples(n, rng.lognormal(0, 0.2, 80), rng.lognormal(0.05 * i, 0.2, 70)) for i, n in enumerate("abc")]
    for m in judge(JudgeConfig(), specs, data).metrics:
        assert m.p_value is not None and 0 <= m.p_value <= 1
        assert m.interval is not None and m.interval[0] <= m.interval[1]
        assert m.estimate is not None and m.effect_size is not None
        assert (m.baseline_n, m.canary_n) == (80, 70)
        assert m.reason and "\n" not in m.reason and "p=" in m.reason
        assert m.threshold is not None and set(m.tests) == {"mann_whitney_up", "mann_whitney_down", "welch_up", "welch_down", "spread_up"}


def test_group_weights_and_thresholds() -> None:
    rng = np.random.default_rng(12)
    specs = [MetricSpec(name="lat", groups=["latency"]), MetricSpec(name="cpu", groups=["saturation"])]
    data = [
        samples("lat", rng.normal(1, 0.05, 60), rng.normal(1.3, 0.05, 60)),
        samples("cpu", rng.normal(1, 0.05, 60), rng.normal(1, 0.05, 60)),
    ]
    r = judge(JudgeConfig(groups={"latency": 20, "saturation": 80}, thresholds=Thresholds(**{"pass": 80, "marginal": 50})), specs, data)
    # the weights make the score (80, "pass" by Kayenta's thresholds), but a +30% latency fails bifrost mode:
    # a weighting must not average a regression away any more than many healthy metrics may
    assert r.score == 80.0 and r.group_scores == {"latency": 0.0, "saturation": 100.0}
    assert r.verdict == "fail"


def test_holm_and_simes_helpers() -> None:
    assert simes(0.004, 0.005) == 0.005 and simes(0.001, 0.5) == 0.002 and simes(0.9, 0.8) == 0.9
    assert simes(0.01, 0.02, 0.5) == pytest.approx(0.03) and simes(0.001, 0.9, 0.95) == pytest.approx(0.003)
    out = holm([0.001, 0.02, 0.003, 0.5], 0.01)
    assert [r for r, _ in out] == [True, False, True, False]
    assert out[0][1] == pytest.approx(0.0025) and out[2][1] == pytest.approx(0.01 / 3)
