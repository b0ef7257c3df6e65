"""The canary judge: Mann-Whitney U per metric, with a direction and an effect-size threshold.

`judge(config, specs, data)` is the whole public API the workflows rely on.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import mannwhitneyu

from canary.config import JudgeConfig, JudgeResult, MetricResult, MetricSamples, MetricSpec

ALPHA = 0.01
DEFAULT_ALLOWED_RATIO = 1.1


def _clean(values: list[float], spec: MetricSpec) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if spec.nan_strategy == "replace":
        return np.nan_to_num(arr, nan=0.0)
    return arr[~np.isnan(arr)]


def classify(spec: MetricSpec, data: MetricSamples, min_samples: int) -> MetricResult:
    """One metric: Pass, High, Low or Nodata, with the reason in one line."""
    base, can = _clean(data.baseline, spec), _clean(data.canary, spec)
    res = MetricResult(name=spec.name, classification="Pass", critical=spec.critical, baseline_n=len(base), canary_n=len(can))
    if len(base) < min_samples or len(can) < min_samples:
        res.classification = "NodataFailMetric" if spec.must_have_data else "Nodata"
        res.reason = f"insufficient data: {len(base)} baseline / {len(can)} canary samples, need {min_samples} each"
        return res
    res.baseline_mean, res.canary_mean = float(base.mean()), float(can.mean())
    ratio = res.canary_mean / res.baseline_mean if res.baseline_mean else math.inf if res.canary_mean else 1.0
    res.effect_size = ratio
    allowed_up = spec.allowed_increase or DEFAULT_ALLOWED_RATIO
    allowed_down = spec.allowed_decrease or 1 / DEFAULT_ALLOWED_RATIO
    if np.array_equal(np.sort(base), np.sort(can)):
        res.p_value = 1.0
        res.reason = "canary and baseline samples are identical"
        return res
    checks = []
    if spec.direction in ("increase", "either"):
        checks.append(("High", "greater", ratio > allowed_up))
    if spec.direction in ("decrease", "either"):
        checks.append(("Low", "less", ratio < allowed_down))
    p_min = 1.0
    for cls, alternative, big_enough in checks:
        p = float(mannwhitneyu(can, base, alternative=alternative).pvalue)
        p_min = min(p_min, p)
        if p < ALPHA and big_enough:
            res.classification = cls  # type: ignore[assignment]
            res.p_value = p
            res.reason = f"canary mean {res.canary_mean:.4g} is {ratio:.2f}x baseline {res.baseline_mean:.4g} (p={p:.2g})"
            return res
    res.p_value = p_min
    res.reason = f"no significant harmful change: ratio {ratio:.2f}, p={p_min:.2g}"
    return res


def judge(config: JudgeConfig, specs: list[MetricSpec], data: list[MetricSamples]) -> JudgeResult:
    """Classify every metric and score the canary 0-100 (share of counted metrics that pass)."""
    by_name = {d.name: d for d in data}
    results = [classify(s, by_name.get(s.name, MetricSamples(name=s.name, baseline=[], canary=[])), config.min_samples) for s in specs]
    counted = [r for r, s in zip(results, specs) if not s.muted and r.classification != "Nodata"]
    nodata = [r for r, s in zip(results, specs) if not s.muted and r.classification == "Nodata"]
    if nodata and len(nodata) * 2 >= len([s for s in specs if not s.muted]):
        return JudgeResult(score=0.0, verdict="insufficient_data", metrics=results, mode=config.mode,
                           summary=f"insufficient data for {len(nodata)} of {len(results)} metrics")
    passed = sum(r.classification == "Pass" for r in counted)
    score = 100.0 * passed / len(counted) if counted else 0.0
    if any(r.critical and r.classification != "Pass" for r in counted):
        score = 0.0
    t = config.thresholds
    verdict = "pass" if score >= t.pass_ else "marginal" if score >= t.marginal else "fail"
    bad = [f"{r.name}: {r.reason}" for r in counted if r.classification != "Pass"]
    summary = f"{verdict.upper()} score {score:.0f}" + (f" — {'; '.join(bad)}" if bad else "")
    return JudgeResult(score=round(score, 2), verdict=verdict, metrics=results, summary=summary, mode=config.mode)  # type: ignore[arg-type]
