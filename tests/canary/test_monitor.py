"""Soak monitor: the false-alarm budget holds over many looks, and a mid-soak regression is caught quickly."""

from __future__ import annotations

import numpy as np
import pytest

from canary import monitor
from canary.config import JudgeConfig, MetricSamples, MetricSpec
from canary.judge import soak_look
from canary.monitor import look_alpha, windows

PER_LOOK = 10  # samples per side between looks (10-minute looks of one-minute intervals)
SPECS = [
    MetricSpec(name="latency", kind="latency"),
    MetricSpec(name="errors", kind="error_rate"),
    MetricSpec(name="cpu", kind="saturation"),
]


def draw(rng: np.random.Generator, n: int, error_factor: float = 1.0) -> dict[str, np.ndarray]:
    return {
        "latency": rng.lognormal(np.log(120), 0.15, n),
        "errors": rng.binomial(2000, 0.005 * error_factor, n) / 2000,
        "cpu": rng.normal(0.55, 0.03, n),
    }


def run_soak(seed: int, looks: int, onset: int | None = None, specs: list[MetricSpec] = SPECS) -> int | None:
    """First alarming look of a simulated soak (None if it never alarms)."""
    rng = np.random.default_rng(seed)
    base: dict[str, list[float]] = {s.name: [] for s in SPECS}
    can: dict[str, list[float]] = {s.name: [] for s in SPECS}
    for look in range(1, looks + 1):
        b, c = draw(rng, PER_LOOK), draw(rng, PER_LOOK, 2.0 if onset is not None and look >= onset else 1.0)
        for name in base:
            base[name].extend(b[name].tolist())
            can[name].extend(c[name].tolist())
        data = [MetricSamples(name=n, baseline=base[n], canary=can[n]) for n in base]
        if soak_look(JudgeConfig(), specs, data, look=look, max_looks=looks).alarm:
            return look
    return None


def test_budget_is_spent_evenly_and_overruns_stay_bounded() -> None:
    assert sum(look_alpha(0.01, k, 60) for k in range(1, 61)) == pytest.approx(0.01)
    assert sum(look_alpha(0.01, k, 60) for k in range(1, 100_000)) < 0.02
    assert windows(600) == [10, 20, 40, 80, 160, 320, 600]
    assert windows(10) == [10] and windows(25) == [10, 20, 25]


def test_aa_soaks_rarely_alarm_over_thirty_looks(monkeypatch: pytest.MonkeyPatch) -> None:
    """40 healthy soaks of 30 looks x 3 metrics: with a 1% soak-wide budget, at most 2 may alarm.

    The same soaks judged at 1% on every look (no spending) alarm far more often.
    """
    alarms = sum(run_soak(seed, looks=30) is not None for seed in range(40))
    assert alarms <= 2  # P(3 or more of 40 | 1%) < 0.01
    monkeypatch.setattr(monitor, "look_alpha", lambda alpha, look, max_looks: alpha)
    unspent = sum(run_soak(seed, looks=30) is not None for seed in range(40))
    assert unspent >= 4 * max(alarms, 1)


def test_mid_soak_error_regression_is_caught_within_two_looks() -> None:
    for seed in range(8):
        first = run_soak(100 + seed, looks=24, onset=12)
        assert first is not None and 12 <= first <= 13, (seed, first)


def test_early_looks_wait_for_data_and_required_metrics_alarm_at_the_end() -> None:
    rng = np.random.default_rng(1)
    b, c = draw(rng, PER_LOOK), draw(rng, PER_LOOK)
    data = [MetricSamples(name=n, baseline=b[n].tolist(), canary=c[n].tolist()) for n in b]
    first = soak_look(JudgeConfig(), SPECS, data, look=1, max_looks=12)
    assert not first.alarm and ": no data: " in first.summary and "healthy" not in first.summary, first.summary  # nothing compared
    assert {m.classification for m in first.metrics} == {"Nodata"}
    required = SPECS + [MetricSpec(name="queue_depth", must_have_data=True)]
    assert not soak_look(JudgeConfig(min_samples=5), required, data, look=3, max_looks=12).alarm
    last = soak_look(JudgeConfig(min_samples=5), required, data, look=12, max_looks=12)
    assert last.alarm and last.metrics[-1].classification == "NodataFailMetric"


def test_critical_and_muted_metrics() -> None:
    rng = np.random.default_rng(2)
    b, c = draw(rng, 120), draw(rng, 120, error_factor=3.0)
    data = [MetricSamples(name=n, baseline=b[n].tolist(), canary=c[n].tolist()) for n in b]
    many = SPECS + [MetricSpec(name=f"other{i}") for i in range(40)]  # one High among many scores above 95 ...
    other = [MetricSamples(name=f"other{i}", baseline=b["cpu"].tolist(), canary=b["cpu"].tolist()) for i in range(40)]
    plain = soak_look(JudgeConfig(), many, data + other, look=12, max_looks=12)
    assert plain.alarm and plain.reasons[0].startswith("errors:")  # ... and still alarms: no dilution
    weighted = [s.model_copy(update={"groups": ["g"]}) for s in many]  # weights shape the score, never dilute
    assert soak_look(JudgeConfig(groups={"g": 100}), weighted, data + other, look=12, max_looks=12).alarm
    critical = [s.model_copy(update={"critical": s.name == "errors"}) for s in many]
    loud = soak_look(JudgeConfig(), critical, data + other, look=12, max_looks=12)
    assert loud.alarm and loud.reasons and loud.reasons[0].startswith("errors:")
    muted = [s.model_copy(update={"muted": s.name == "errors"}) for s in SPECS]
    assert not soak_look(JudgeConfig(), muted, data, look=12, max_looks=12).alarm


def test_each_look_is_stateless_and_explains_its_window() -> None:
    rng = np.random.default_rng(3)
    b, c = draw(rng, 200), draw(rng, 200, error_factor=2.0)
    data = [MetricSamples(name=n, baseline=b[n].tolist(), canary=c[n].tolist()) for n in b]
    one = soak_look(JudgeConfig(), SPECS, data, look=20, max_looks=24)
    two = soak_look(JudgeConfig(), SPECS, data, look=20, max_looks=24)
    assert one == two and one.alarm
    errors = next(m for m in one.metrics if m.name == "errors")
    assert errors.classification == "High" and errors.reason.startswith("[last ")
    assert errors.threshold is not None and errors.threshold <= 0.01 / 24


def test_kayenta_mode_alarms_when_the_kayenta_verdict_is_not_pass() -> None:
    rng = np.random.default_rng(4)
    b, c = draw(rng, 60), draw(rng, 60, error_factor=3.0)
    data = [MetricSamples(name=n, baseline=b[n].tolist(), canary=c[n].tolist()) for n in b]
    look = soak_look(JudgeConfig(mode="kayenta"), SPECS, data, look=6, max_looks=24)
    assert look.alarm and "Kayenta mode" in look.summary
    assert any(r.startswith("errors:") for r in look.reasons)
