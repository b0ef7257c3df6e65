"""What both judge modes share: cleaning samples, the skeleton of a metric's result, the scorer's view.

Also the checks decided before any test (bad values, too few samples, identical data), used by bifrost mode
and by the soak monitor.
"""

from __future__ import annotations

import numpy as np

from canary.config import MetricResult, MetricSamples, MetricSpec
from canary.preprocess import clean
from canary.scoring import Scored


def prepare(spec: MetricSpec, samples: MetricSamples) -> tuple[np.ndarray, np.ndarray]:
    """Baseline and canary after the metric's NaN policy and outlier removal."""
    return clean(samples.baseline, spec.nan_strategy, spec.outliers), clean(samples.canary, spec.nan_strategy, spec.outliers)


def samples_of(name: str, data: list[MetricSamples]) -> MetricSamples:
    """The samples of metric `name`; empty on both sides when the source returned none."""
    return next((d for d in data if d.name == name), None) or MetricSamples(name=name, baseline=[], canary=[])


def metric_result(spec: MetricSpec, base: np.ndarray, can: np.ndarray, **kw: object) -> MetricResult:
    """A metric's result with the sample counts and means filled in; `kw` gives the classification and reason."""
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
        **kw,
    )


def infinite_values(spec: MetricSpec, base: np.ndarray, can: np.ndarray) -> MetricResult | None:
    """An Error result when either side holds an infinite value (no test means anything then)."""
    if np.isfinite(base).all() and np.isfinite(can).all():
        return None
    return metric_result(spec, base, can, classification="Error", reason="samples contain infinite values; fix the metric query")


def precheck(spec: MetricSpec, base: np.ndarray, can: np.ndarray, min_samples: int) -> MetricResult | None:
    """The outcomes decided before any test: bad values, too few samples, identical or constant data."""
    bad = infinite_values(spec, base, can)
    if bad is not None:
        return bad
    if len(base) < min_samples or len(can) < min_samples:
        label = "NodataFailMetric" if spec.must_have_data else "Nodata"
        why = f"insufficient data: {len(base)} baseline / {len(can)} canary samples, need {min_samples} per side"
        why += "; required metric, counted as a failure" if spec.must_have_data else "; no verdict until more data arrives"
        return metric_result(spec, base, can, classification=label, critical=spec.must_have_data and spec.critical, reason=why)
    if np.array_equal(np.sort(base), np.sort(can)):
        return metric_result(spec, base, can, classification="Pass", p_value=1.0, reason="canary and baseline samples are identical")
    if base.min() == base.max() == can.min() == can.max():
        return metric_result(spec, base, can, classification="Pass", p_value=1.0, reason="every sample has the same value")
    return None


def scored(specs: list[MetricSpec], results: list[MetricResult]) -> list[Scored]:
    """The scorer's view of the metrics that count (muted ones are reported, never scored)."""
    return [Scored(r.classification, s.groups, r.critical) for s, r in zip(specs, results) if not s.muted]
