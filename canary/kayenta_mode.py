"""Kayenta mode: Kayenta's NetflixACAJudge classifier (`canary.kayenta`) per metric, its scorer and verdict.

The soak monitor in this mode re-runs the judge on the cumulative data and alarms whenever it does not pass.
"""

from __future__ import annotations

import numpy as np

from canary import kayenta
from canary.config import JudgeConfig, JudgeResult, MetricResult, MetricSamples, MetricSpec, MonitorResult
from canary.findings import infinite_values, metric_result, prepare, samples_of, scored
from canary.ranks import u_statistic
from canary.scoring import verdict_for, weighted_sum


def kayenta_params(spec: MetricSpec) -> kayenta.KayentaParams:
    """Production NetflixACAJudge settings with the metric's effect thresholds (default 1.0, or 0.5 for CLES)."""
    default = 0.5 if spec.effect_size == "cles" else 1.0
    return kayenta.KayentaParams(
        allowed_decrease=spec.allowed_decrease or default,
        allowed_increase=spec.allowed_increase or default,
        critical_decrease=spec.critical_decrease or default,
        critical_increase=spec.critical_increase or default,
        measure=spec.effect_size,
    )


def kayenta_metric(spec: MetricSpec, base: np.ndarray, can: np.ndarray, params: kayenta.KayentaParams | None = None) -> MetricResult:
    """Kayenta's classification of one preprocessed metric, with the p-value and numbers for the report."""
    params = params or kayenta_params(spec)
    bad = infinite_values(spec, base, can)  # Kayenta would compute garbage intervals here
    if bad is not None:
        return bad
    try:
        c = kayenta.classify(
            can, base, direction=spec.direction, params=params, nan_strategy=spec.nan_strategy,
            critical=spec.critical, must_have_data=spec.must_have_data, name=spec.name,
        )
    except (ArithmeticError, ValueError, FloatingPointError) as err:
        return metric_result(spec, base, can, classification="Error", reason=f"Kayenta classifier failed: {err}")
    p = None
    if len(base) and len(can):
        p = u_statistic(np.sort(can), np.sort(base)).p_two_sided()
    iv = c.interval
    return metric_result(
        spec, base, can,
        classification=c.label,
        critical=c.critical,
        p_value=p,
        interval=(iv.lower, iv.upper) if iv else None,
        estimate=iv.estimate if iv else None,
        effect_size=c.effect,
        reason=c.reason,
        interval_level=params.conf_level if iv else None,
    )


def judge_kayenta(config: JudgeConfig, specs: list[MetricSpec], data: list[MetricSamples]) -> JudgeResult:
    """Kayenta mode: classify each metric as Kayenta does, then its weighted score and verdict."""
    results = [kayenta_metric(s, *prepare(s, samples_of(s.name, data))) for s in specs]
    sc = weighted_sum(scored(specs, results), config.groups)
    verdict = verdict_for(sc.score, config.thresholds.pass_, config.thresholds.marginal)
    bad = [f"{r.name} {r.classification}" for s, r in zip(specs, results) if not s.muted and r.classification != "Pass"]
    summary = f"{verdict.upper()} score {sc.score:.2f} (Kayenta mode)"
    summary += f": {sc.reason}" if sc.reason else ""
    summary += f" — {', '.join(bad)}" if bad else " — every metric passed"
    return JudgeResult(score=sc.score, verdict=verdict, metrics=results, summary=summary, mode="kayenta", group_scores=sc.group_scores)


def classify_kayenta(spec: MetricSpec, data: MetricSamples) -> MetricResult:
    """One metric as Kayenta classifies it (Kayenta has no minimum sample count and no alpha)."""
    return kayenta_metric(spec, *prepare(spec, data))


def look_kayenta(config: JudgeConfig, specs: list[MetricSpec], data: list[MetricSamples], *, look: int, max_looks: int) -> MonitorResult:
    result = judge_kayenta(config, specs, data)
    alarm = result.verdict != "pass"
    reasons = [f"{m.name}: {m.reason}" for m in result.metrics if m.classification != "Pass"] if alarm else []
    summary = f"look {look}/{max_looks} (Kayenta mode): " + (f"ALARM — {result.summary}" if alarm else "healthy")
    return MonitorResult(alarm=alarm, look=look, max_looks=max_looks, reasons=reasons, metrics=result.metrics, summary=summary)
