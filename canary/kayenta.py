"""Kayenta mode: a re-implementation of Kayenta's NetflixACAJudge Mann-Whitney classifier.

Interval: R `wilcox.test` normal approximation inverted with R's `zeroin`; High/Low must clear a dead zone.
"""

# The interval inverts the normal approximation of the rank-sum statistic (continuity and tie
# corrections), each root found with R's zeroin Brent variant (tolerance 1e-4, 1000 iterations) as
# Kayenta does; the estimate is the root at zq = 0. High when the interval's lower end clears
# tolerance * |estimate| and the effect size reaches the allowed increase; Low symmetrically.

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri

from canary import effects
from canary.ranks import tie_groups, u_statistic
from common.types import Classification as Label
from common.types import Direction, EffectMeasure, NanStrategy

EPSILON = 2.220446049250313e-16
PRODUCTION_TOLERANCE = 0.25
PRODUCTION_CONF_LEVEL = 0.98
NOISE_SEED = 0  # Kayenta's noise for two constant samples is random; ours is seeded for repeatable verdicts



@dataclass(frozen=True)
class KayentaParams:
    """MannWhitneyClassifier settings; the defaults are the production NetflixACAJudge values."""

    tolerance: float = PRODUCTION_TOLERANCE
    conf_level: float = PRODUCTION_CONF_LEVEL
    allowed_decrease: float = 1.0
    allowed_increase: float = 1.0
    critical_decrease: float = 1.0
    critical_increase: float = 1.0
    measure: EffectMeasure = "mean_ratio"


@dataclass(frozen=True)
class Interval:
    """Kayenta's Mann-Whitney interval and estimate for the shift canary - baseline."""

    lower: float
    upper: float
    estimate: float


@dataclass(frozen=True)
class Classification:
    """What Kayenta's classifier decides for one metric, plus the numbers behind it."""

    label: Label
    critical: bool
    reason: str
    deviation: float = 1.0  # always the mean ratio, NaN when a mean is 0
    effect: float | None = None  # the gated effect size (mean ratio or CLES)
    interval: Interval | None = None
    bound: float | None = None  # tolerance * |estimate|


def zeroin(f: Callable[[float], float], ax: float, bx: float, fa: float, fb: float, tol: float = 1e-4, maxit: int = 1000) -> float:
    """Brent's root finder with R's `R_zeroin2` semantics (given f(ax), f(bx); no bracketing check)."""
    a, b, c = ax, bx, ax
    fc = fa
    if fa == 0.0:
        return a
    if fb == 0.0:
        return b
    for _ in range(maxit + 1):
        prev_step = b - a
        if abs(fc) < abs(fb):  # make b the best approximation so far
            a, b, c = b, c, b
            fa, fb, fc = fb, fc, fb
        tol_act = 2 * EPSILON * abs(b) + tol / 2
        new_step = (c - b) / 2
        if abs(new_step) <= tol_act or fb == 0.0:
            return b
        if abs(prev_step) >= tol_act and abs(fa) > abs(fb):  # try interpolation
            cb = c - b
            if a == c:  # two distinct points: secant
                t1 = fb / fa
                p = cb * t1
                q = 1.0 - t1
            else:  # inverse quadratic interpolation
                q = fa / fc
                t1 = fb / fc
                t2 = fb / fa
                p = t2 * (cb * q * (q - t1) - (b - a) * (t1 - 1.0))
                q = (q - 1.0) * (t1 - 1.0) * (t2 - 1.0)
            if p > 0:
                q = -q
            else:
                p = -p
            if p < (0.75 * cb * q - abs(tol_act * q) / 2) and p < abs(prev_step * q / 2):
                new_step = p / q
        if abs(new_step) < tol_act:
            new_step = tol_act if new_step > 0 else -tol_act
        a, fa = b, fb
        b += new_step
        fb = f(b)
        if (fb > 0 and fc > 0) or (fb < 0 and fc < 0):
            c, fc = a, fa
    return b


def wilcoxon_diff(mu: float, zq: float, x_sorted: np.ndarray, y_sorted: np.ndarray) -> float:
    """Kayenta's `wilcoxonDiff`: standardised rank-sum of x - mu against y, minus the quantile zq.

    Binary search on sorted samples; rank sums and tie counts are exact, so results match a pooled ranking."""
    nx, ny = float(len(x_sorted)), float(len(y_sorted))
    shifted = x_sorted - mu
    u = u_statistic(shifted, y_sorted)
    dz = u.u - nx * ny / 2
    correction = math.copysign(0.5, dz) if dz != 0 else 0.0
    ties = _tie_term(shifted, y_sorted)
    sigma = math.sqrt((nx * ny / 12) * ((nx + ny + 1) - ties / ((nx + ny) * (nx + ny - 1))))
    if sigma == 0:
        raise ArithmeticError("cannot compute confidence interval when all observations are tied")
    return (dz - correction) / sigma - zq


def _tie_term(x_sorted: np.ndarray, y_sorted: np.ndarray) -> float:
    starts, a = tie_groups(x_sorted)
    b = tie_groups(y_sorted)[1].astype(float)
    cross = (np.searchsorted(y_sorted, x_sorted[starts], "right") - np.searchsorted(y_sorted, x_sorted[starts], "left")).astype(float)
    af = a.astype(float)
    return float((af**3 - af).sum() + (b**3 - b).sum() + (3.0 * af * cross * (af + cross)).sum())


def mann_whitney_interval(experiment: np.ndarray, control: np.ndarray, conf_level: float) -> Interval:
    """Kayenta's confidence interval and estimate for the location shift experiment - control."""
    x, y = np.sort(experiment), np.sort(control)
    mu_min, mu_max = float(x[0] - y[-1]), float(x[-1] - y[0])
    zquant = float(ndtri((1.0 - conf_level) / 2))

    def root(zq: float) -> float:
        f_lower = wilcoxon_diff(mu_min, zq, x, y)
        f_upper = wilcoxon_diff(mu_max, zq, x, y)
        if f_lower <= 0:
            return mu_min
        if f_upper >= 0:
            return mu_max
        return zeroin(lambda mu: wilcoxon_diff(mu, zq, x, y), mu_min, mu_max, f_lower, f_upper)

    lower, upper = root(-zquant), root(zquant)
    f_lo, f_hi = wilcoxon_diff(mu_min, 0.0, x, y), wilcoxon_diff(mu_max, 0.0, x, y)
    estimate = zeroin(lambda mu: wilcoxon_diff(mu, 0.0, x, y), mu_min, mu_max, f_lo, f_hi)
    return Interval(lower, upper, estimate)


def _add_noise(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    scale = abs(float(values[0])) * 1e-5
    return values + rng.normal(0.0, scale, len(values)) if scale > 0 else values


def classify(
    experiment: np.ndarray,
    control: np.ndarray,
    *,
    direction: Direction,
    params: KayentaParams,
    nan_strategy: NanStrategy = "remove",
    critical: bool = False,
    must_have_data: bool = False,
    name: str = "metric",
) -> Classification:
    """Kayenta's MannWhitneyClassifier on already preprocessed samples."""
    if len(experiment) == 0 or len(control) == 0:
        if nan_strategy == "remove":
            reason = f"Missing data for {name}"
            if must_have_data and not critical:
                return Classification("NodataFailMetric", False, reason)
            return Classification("Nodata", critical, reason)
        return Classification("Pass", False, "no data (NaNs replaced by 0): passes")
    if np.array_equal(np.sort(experiment), np.sort(control)):
        return Classification("Pass", False, "canary and baseline data are identical")
    if np.unique(np.concatenate([experiment, control])).size == 1:
        return Classification("Pass", False, "every observation has the same value")
    if np.unique(experiment).size == 1 and np.unique(control).size == 1:
        rng = np.random.default_rng(NOISE_SEED)
        experiment, control = _add_noise(experiment, rng), _add_noise(control, rng)
    interval = mann_whitney_interval(experiment, control, params.conf_level)
    deviation = effects.mean_ratio(experiment, control)
    effect = deviation if params.measure == "mean_ratio" else effects.cles(experiment, control)
    bound = params.tolerance * abs(interval.estimate)
    no_gate = math.isnan(effect)
    high = direction in ("increase", "either") and interval.lower > bound and (no_gate or effect >= params.allowed_increase)
    low = direction in ("decrease", "either") and interval.upper < -bound and (no_gate or effect <= params.allowed_decrease)
    label: Label = "High" if high else "Low" if low else "Pass"
    is_critical = critical and (
        (high and (no_gate or effect >= params.critical_increase)) or (low and (no_gate or effect <= params.critical_decrease))
    )
    reason = _reason(label, direction, interval, bound, effect, params)
    return Classification(label, is_critical, reason, deviation, None if no_gate else effect, interval, bound)


def _reason(label: str, direction: str, iv: Interval, bound: float, effect: float, params: KayentaParams) -> str:
    ci = f"{params.conf_level:.0%} CI of shift [{iv.lower:.4g}, {iv.upper:.4g}]"
    zone = f"dead zone ±{bound:.4g} ({params.tolerance:g} × |estimate {iv.estimate:.4g}|)"
    eff = "effect n/a" if math.isnan(effect) else f"{params.measure} {effect:.3g}"
    if label == "High":
        return f"High: {ci} lies above the {zone}; {eff}"
    if label == "Low":
        return f"Low: {ci} lies below the {zone}; {eff}"
    if iv.lower > bound:
        if direction == "decrease":
            return f"Pass: canary higher ({ci} above the {zone}) but only decreases are judged"
        return f"Pass: {ci} lies above the {zone} but {eff} is below the allowed increase {params.allowed_increase:g}"
    if iv.upper < -bound:
        if direction == "increase":
            return f"Pass: canary lower ({ci} below the {zone}) but only increases are judged"
        return f"Pass: {ci} lies below the {zone} but {eff} is above the allowed decrease {params.allowed_decrease:g}"
    return f"Pass: {ci} does not clear the {zone}"


def mean_inequality(experiment: np.ndarray, control: np.ndarray, direction: str) -> Label:
    """Kayenta's MeanInequalityClassifier (a benchmarking baseline): any difference of means."""
    if len(experiment) == 0 or len(control) == 0:
        return "Nodata"
    me, mc = float(np.mean(experiment)), float(np.mean(control))
    if direction in ("increase", "either") and me > mc:
        return "High"
    if direction in ("decrease", "either") and me < mc:
        return "Low"
    return "Pass"
