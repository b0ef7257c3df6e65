"""The canary judge: classify every metric, score the canary 0-100 and give a verdict.

`config.mode` picks the algorithm: 'bifrost' (default, `canary.bifrost`) or 'kayenta' (`canary.kayenta`).
"""

from __future__ import annotations

import numpy as np

from canary import bifrost, kayenta
from canary.config import JudgeConfig, JudgeResult, MetricResult, MetricSamples, MetricSpec
from canary.preprocess import clean
from canary.ranks import u_statistic
from canary.scoring import Scored, verdict_for, weighted_sum


def prepare(spec: MetricSpec, samples: MetricSamples) -> tuple[np.ndarray, np.ndarray]:
    """Baseline and canary after the metric's NaN policy and outlier removal."""
    return clean(samples.baseline, spec.nan_strategy, spec.outliers), clean(samples.canary, spec.nan_strategy, spec.outliers)


def _base(spec: MetricSpec, base: np.ndarray, can: np.ndarray, **kw: object) -> MetricResult:
    return MetricResult(
        name=spec.name,
        baseline_n=len(base),
        canary_n=len(can),
        baseline_mean=float(base.mean()) if len(base) else None,
        canary_mean=float(can.mean()) if len(can) else None,
        direction=spec.direction,
        muted=spec.muted,
        groups=list(spec.groups),
        effect_measure=spec.effect_size,
        **kw,  # type: ignore[arg-type]
    )


def bifrost_precheck(spec: MetricSpec, base: np.ndarray, can: np.ndarray, min_samples: int) -> MetricResult | None:
    """The outcomes decided before any test: bad values, too few samples, identical or constant data."""
    if not (np.isfinite(base).all() and np.isfinite(can).all()):
        return _base(spec, base, can, classification="Error", reason="samples contain infinite values; fix the metric query")
    if len(base) < min_samples or len(can) < min_samples:
        label = "NodataFailMetric" if spec.must_have_data else "Nodata"
        why = f"insufficient data: {len(base)} baseline / {len(can)} canary samples, need {min_samples} per side"
        why += "; required metric, counted as a failure" if spec.must_have_data else "; no verdict until more data arrives"
        return _base(spec, base, can, classification=label, critical=spec.must_have_data and spec.critical, reason=why)
    if np.array_equal(np.sort(base), np.sort(can)):
        return _base(spec, base, can, classification="Pass", p_value=1.0, reason="canary and baseline samples are identical")
    if base.min() == base.max() == can.min() == can.max():
        return _base(spec, base, can, classification="Pass", p_value=1.0, reason="every sample has the same value")
    return None


def classify(spec: MetricSpec, data: MetricSamples, min_samples: int, *, mode: str = "bifrost", alpha: float = bifrost.DEFAULT_ALPHA) -> MetricResult:
    """One metric on its own (its own family at level `alpha`), as Pass, High, Low, Nodata, NodataFailMetric or Error.

    Kayenta mode ignores `min_samples` and `alpha`, as Kayenta does."""
    base, can = prepare(spec, data)
    if mode == "kayenta":
        return kayenta_metric(spec, base, can)
    early = bifrost_precheck(spec, base, can, min_samples)
    return early or bifrost.decide(spec, bifrost.gather(base, can), alpha)


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
    if not (np.isfinite(base).all() and np.isfinite(can).all()):  # Kayenta would compute garbage intervals here
        return _base(spec, base, can, classification="Error", reason="samples contain infinite values; fix the metric query")
    try:
        c = kayenta.classify(
            can, base, direction=spec.direction, params=params, nan_strategy=spec.nan_strategy,
            critical=spec.critical, must_have_data=spec.must_have_data, name=spec.name,
        )
    except (ArithmeticError, ValueError, FloatingPointError) as err:
        return _base(spec, base, can, classification="Error", reason=f"Kayenta classifier failed: {err}")
    p = None
    if len(base) and len(can):
        p = u_statistic(np.sort(can), np.sort(base)).p_two_sided()
    iv = c.interval
    return _base(
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


def judge(config: JudgeConfig, specs: list[MetricSpec], data: list[MetricSamples]) -> JudgeResult:
    """Classify every metric and score the canary 0-100 (see the module doc for the two modes)."""
    by_name = {d.name: d for d in data}
    prepared = [prepare(s, by_name.get(s.name) or MetricSamples(name=s.name, baseline=[], canary=[])) for s in specs]
    if config.mode == "kayenta":
        results = [kayenta_metric(s, b, c) for s, (b, c) in zip(specs, prepared)]
        return _kayenta_verdict(config, specs, results)
    return _bifrost_judge(config, specs, prepared)


def _scored(specs: list[MetricSpec], results: list[MetricResult]) -> list[Scored]:
    return [Scored(r.classification, s.groups, r.critical) for s, r in zip(specs, results) if not s.muted]


def _kayenta_verdict(config: JudgeConfig, specs: list[MetricSpec], results: list[MetricResult]) -> JudgeResult:
    sc = weighted_sum(_scored(specs, results), config.groups)
    verdict = verdict_for(sc.score, config.thresholds.pass_, config.thresholds.marginal)
    bad = [f"{r.name} {r.classification}" for s, r in zip(specs, results) if not s.muted and r.classification != "Pass"]
    summary = f"{verdict.upper()} score {sc.score:.2f} (Kayenta mode)"
    summary += f": {sc.reason}" if sc.reason else ""
    summary += f" — {', '.join(bad)}" if bad else " — every metric passed"
    return JudgeResult(score=sc.score, verdict=verdict, metrics=results, summary=summary, mode="kayenta", group_scores=sc.group_scores)  # type: ignore[arg-type]


def _bifrost_judge(config: JudgeConfig, specs: list[MetricSpec], prepared: list[tuple[np.ndarray, np.ndarray]]) -> JudgeResult:
    results: list[MetricResult | None] = []
    evidence: dict[int, bifrost.Evidence] = {}
    for i, (spec, (base, can)) in enumerate(zip(specs, prepared)):
        early = bifrost_precheck(spec, base, can, config.min_samples)
        results.append(early)
        if early is None:
            evidence[i] = bifrost.gather(base, can)
    family = [i for i in evidence if not specs[i].muted]
    holm = bifrost.holm([evidence[i].p_value(specs[i].direction) for i in family], config.alpha)
    for i, (rejected, level) in zip(family, holm):
        results[i] = bifrost.decide(specs[i], evidence[i], level, rejected=rejected)
    for i in evidence:
        if specs[i].muted:  # report-only: judged at the family's first Holm level, never scored
            results[i] = bifrost.decide(specs[i], evidence[i], config.alpha / max(1, len(family)))
    final = [r for r in results if r is not None]
    return _bifrost_verdict(config, specs, final)


def _bifrost_verdict(config: JudgeConfig, specs: list[MetricSpec], results: list[MetricResult]) -> JudgeResult:
    active = [(s, r) for s, r in zip(specs, results) if not s.muted]
    sc = weighted_sum(_scored(specs, results), config.groups, nodata_rule=False)
    t = config.thresholds
    regressed = [r for _, r in active if r.classification in ("High", "Low", "NodataFailMetric")]
    unknown = [r for _, r in active if r.classification in ("Nodata", "Error")]
    verdict = verdict_for(sc.score, t.pass_, t.marginal)
    if not active or (verdict == "pass" and unknown):  # evidence of a regression outranks missing data
        verdict = "insufficient_data"
    if verdict == "insufficient_data":
        detail = "; ".join(f"{r.name}: {r.reason}" for r in unknown) or "no metrics to judge"
        summary = f"INSUFFICIENT DATA (score {sc.score:.2f} over the metrics with data) — {detail}"
    else:
        summary = f"{verdict.upper()} score {sc.score:.2f}"
        if sc.reason:
            summary += f" ({sc.reason})"
        if regressed:
            summary += f" — {len(regressed)} of {len(active)} metrics regressed: " + ", ".join(
                f"{r.name} {r.classification}" + (" (critical)" if r.critical else "") for r in regressed
            )
        else:
            summary += f" — {len(active)} metrics judged, none regressed at a {config.alpha:.0%} family-wise false-alarm rate"
        if unknown:
            summary += "; no data for " + ", ".join(r.name for r in unknown)
    return JudgeResult(score=sc.score, verdict=verdict, metrics=results, summary=summary, mode="bifrost", group_scores=sc.group_scores)  # type: ignore[arg-type]
