"""An exact permutation test of the canary's total on zero-heavy counts: valid where normal approximations are not.

A counter that is 0 in most intervals (errors, retries) has a handful of tied values; the rank and mean tests'
normal approximations are anti-conservative there at the small levels a rollout spends (40 errors against 10 in
an hour: Mann-Whitney 3e-6, exact 1e-5). Given the pooled sample, every split into canary and baseline is equally
likely under the null (independent, identically distributed intervals, bursty or not), so the chance that the
canary's total reaches the observed one is computed exactly by counting splits: no Poisson or binomial model.
"""

# Counting: values become integer steps above the pooled minimum (the data's quantum); the zeros (the minimum)
# add nothing to a total, so a table f[j, s] counts the ways to draw j of the non-zero intervals with total s,
# value by value (binomial coefficients over each value's multiplicity), and the zeros fill the canary's other
# n - j places in C(zeros, n - j) ways. Cost ~ (non-zero intervals) x (canary size) x (total), so it runs only
# on zero-heavy data (most of the pooled sample at its minimum) and below a size cap; elsewhere it says nothing.

from __future__ import annotations

import numpy as np
from scipy.special import gammaln

ZERO_HEAVY = 0.5  # at least this share of the pooled sample at its minimum: a zero-heavy counter
MAX_CELLS = 4_000_000  # (non-zero intervals) x (table size) above this: too costly, no count test


def _steps(pooled: np.ndarray, quantum: float) -> np.ndarray | None:
    """The pooled values as integer steps of `quantum` above the minimum, or None when they are not on that grid."""
    if quantum <= 0 or not np.all(np.isfinite(pooled)):
        return None
    scaled = (pooled - pooled.min()) / quantum
    steps = np.rint(scaled)
    if np.any(np.abs(scaled - steps) > 1e-6 * np.maximum(1.0, steps)):
        return None
    as_int: np.ndarray = steps.astype(np.int64)
    return as_int


def count_test_p(canary: np.ndarray, baseline: np.ndarray, quantum: float) -> float | None:
    """Exact permutation p-value for 'the canary's total is higher' on zero-heavy counts; None when not applicable
    (not zero-heavy, not on a grid of `quantum`, or too large to count)."""
    n, pooled = len(canary), np.concatenate([canary, baseline])
    total_n = len(pooled)
    if n == 0 or len(baseline) == 0 or np.count_nonzero(pooled == pooled.min()) < ZERO_HEAVY * total_n:
        return None  # checked first: on long samples that are not zero-heavy this is all the count test costs
    steps = _steps(pooled, quantum)
    if steps is None:
        return None
    nonzero = steps[steps > 0]  # the minimum is step 0, so at least the zero-heavy share checked above is zeros
    zeros = total_n - len(nonzero)
    if len(nonzero) == 0:
        return None
    observed = int(steps[:n].sum())
    top_j, top_s = min(n, len(nonzero)), int(nonzero.sum())
    if len(nonzero) * (top_j + 1) * (top_s + 1) > MAX_CELLS:
        return None
    f = np.zeros((top_j + 1, top_s + 1))
    f[0, 0] = 1.0
    for v, k in zip(*np.unique(nonzero, return_counts=True)):
        g, coef = f.copy(), 1.0
        for c in range(1, min(int(k), top_j) + 1):
            coef = coef * (k - c + 1) / c
            g[c:, c * v:] += coef * f[: top_j + 1 - c, : top_s + 1 - c * v]
        f = g / g.max()  # rescaled: only ratios matter, and the counts would overflow on long windows
    j = np.arange(top_j + 1)
    fill = n - j  # canary places left for zeros
    ok = (fill >= 0) & (fill <= zeros)
    log_w = np.full(top_j + 1, -np.inf)
    log_w[ok] = gammaln(zeros + 1) - gammaln(fill[ok] + 1) - gammaln(zeros - fill[ok] + 1)
    ways = (f * np.exp(log_w - log_w[ok].max())[:, None]).sum(axis=0)
    return float(min(1.0, ways[observed:].sum() / ways.sum()))
