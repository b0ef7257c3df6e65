"""Effect sizes and summary statistics, with Kayenta's definitions (canary = experiment, baseline = control)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import rankdata


def mean_ratio(canary: np.ndarray, baseline: np.ndarray) -> float:
    """mean(canary) / mean(baseline); NaN when either mean is 0 (Kayenta's definition)."""
    mc, mb = float(np.mean(canary)), float(np.mean(baseline))
    if mc == 0.0 or mb == 0.0:
        return math.nan
    return mc / mb


def cles(canary: np.ndarray, baseline: np.ndarray) -> float:
    """Common-language effect size P(canary > baseline) + P(equal)/2, from pooled average ranks."""
    m, n = len(canary), len(baseline)
    ranks = rankdata(np.concatenate([canary, baseline]))
    r1 = float(ranks[:m].sum())
    return (2 * r1 - m * (m + 1)) / (2 * n * m)


def cohen_d(canary: np.ndarray, baseline: np.ndarray) -> float:
    """|mean difference| over the pooled sample standard deviation."""
    n1, n2 = len(canary), len(baseline)
    pooled = ((n1 - 1) * np.var(canary, ddof=1) + (n2 - 1) * np.var(baseline, ddof=1)) / (n1 + n2 - 2)
    return abs(float(np.mean(canary) - np.mean(baseline))) / math.sqrt(pooled)


@dataclass(frozen=True)
class Summary:
    """Count, mean, sample standard deviation, min and max; all zero for no data."""

    count: int
    mean: float
    std: float
    min: float
    max: float


def summary(values: np.ndarray) -> Summary:
    """Summary statistics of one sample (Kayenta's: empty gives zeros, one point has std 0)."""
    if len(values) == 0:
        return Summary(0, 0.0, 0.0, 0.0, 0.0)
    std = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    return Summary(len(values), float(np.mean(values)), std, float(np.min(values)), float(np.max(values)))
