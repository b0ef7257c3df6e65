"""Rank statistics for two samples: Mann-Whitney U with ties, and order statistics of pairwise differences.

Sorted arrays, O((n+m) log) per pass; the n*m pairwise differences are never formed unless there are few."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr, ndtri

_ENUMERATE_LIMIT = 1 << 15  # at most this many candidate pairs are enumerated and partitioned directly
_FIRST_SAMPLE = 1 << 13  # pairs sampled once from the whole matrix to place the first pivots
_SAMPLE = 1 << 12  # candidate pairs sampled per later round when interpolation stalls (ties)
_Z_SPREAD = 3.5  # pivots sit this many binomial standard errors either side of the target rank
_MAX_ROUNDS = 64


def tie_groups(sorted_values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index of the first element of each run of equal values in a sorted array, and the run lengths."""
    if len(sorted_values) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate(([True], sorted_values[1:] != sorted_values[:-1])))
    return starts, np.diff(np.append(starts, len(sorted_values)))


@dataclass(frozen=True)
class UStat:
    """Mann-Whitney U of the canary (`#(c > b) + #(c == b)/2`) and its tie-corrected null spread."""

    u: float
    n: int  # canary size
    m: int  # baseline size
    sigma: float  # standard deviation of U under H0, corrected for ties

    @property
    def cles(self) -> float:
        """Common-language effect size: P(canary > baseline) + P(equal)/2."""
        return self.u / (self.n * self.m)

    def p_greater(self) -> float:
        """One-sided p-value for 'canary tends to be larger' (normal approximation, continuity corrected)."""
        if self.sigma == 0:
            return 1.0
        return float(ndtr(-(self.u - self.n * self.m / 2 - 0.5) / self.sigma))

    def p_less(self) -> float:
        """One-sided p-value for 'canary tends to be smaller'."""
        if self.sigma == 0:
            return 1.0
        return float(ndtr((self.u - self.n * self.m / 2 + 0.5) / self.sigma))

    def p_two_sided(self) -> float:
        """Two-sided p-value (twice the smaller one-sided value, at most 1)."""
        return min(1.0, 2 * min(self.p_greater(), self.p_less()))


def u_statistic(canary: np.ndarray, baseline: np.ndarray) -> UStat:
    """U and its tie-corrected variance from two sorted, non-empty samples, without a pooled sort."""
    n, m = len(canary), len(baseline)
    left = np.searchsorted(baseline, canary, side="left")
    right = np.searchsorted(baseline, canary, side="right")
    equal = right - left
    u = float(left.sum()) + 0.5 * float(equal.sum())
    starts, runs = tie_groups(canary)
    a = runs.astype(float)
    cross = equal[starts].astype(float)  # baseline values equal to each distinct canary value
    b = tie_groups(baseline)[1].astype(float)
    tie_term = float((a**3 - a).sum() + (b**3 - b).sum() + (3.0 * a * cross * (a + cross)).sum())
    total = n + m
    var = n * m / 12.0 * ((total + 1) - tie_term / (total * (total - 1))) if total > 1 else 0.0
    return UStat(u=u, n=n, m=m, sigma=float(np.sqrt(max(var, 0.0))))


class _Matrix:
    """The implicit sorted matrix D[i, j] = rows[i] + cols[j] of canary - baseline differences."""

    def __init__(self, canary: np.ndarray, baseline: np.ndarray, seed: int) -> None:
        self.rows = canary[::-1].copy()  # descending, so search keys t - rows ascend (faster searches)
        self.cols = -baseline[::-1]  # ascending; rows[i] + cols[j] grows with j
        self.n, self.m = len(canary), len(baseline)
        self.rng = np.random.default_rng(seed)

    def count_le(self, t: float) -> np.ndarray:
        """Per row, how many entries are <= t (exactly, for the rounded differences)."""
        return self._exact(np.searchsorted(self.cols, t - self.rows, side="right"), t, strict=False)

    def count_lt(self, t: float) -> np.ndarray:
        """Per row, how many entries are < t."""
        return self._exact(np.searchsorted(self.cols, t - self.rows, side="left"), t, strict=True)

    def _exact(self, count: np.ndarray, t: float, strict: bool) -> np.ndarray:
        # searching t - rows[i] among cols can misplace entries within an ulp of t; move each row's
        # boundary until the rounded entries rows[i] + cols[j] themselves sit on the right side of t
        inside = np.less if strict else np.less_equal
        while True:
            last = np.maximum(count - 1, 0)
            over = (count > 0) & ~inside(self.rows + self.cols[last], t)
            if not over.any():
                break
            count = count - over
        while True:
            nxt = np.minimum(count, self.m - 1)
            under = (count < self.m) & inside(self.rows + self.cols[nxt], t)
            if not under.any():
                return count
            count = count + under

    def sample_all(self, size: int) -> np.ndarray:
        i = self.rng.integers(0, self.n, size=size)
        j = self.rng.integers(0, self.m, size=size)
        return np.sort(self.rows[i] + self.cols[j])

    def sample_between(self, lo: np.ndarray, widths: np.ndarray, size: int) -> np.ndarray:
        ends = np.cumsum(widths)
        picks = np.sort(self.rng.integers(0, int(ends[-1]), size=size))
        row = np.searchsorted(ends, picks, side="right")
        col = lo[row] + picks - (ends[row] - widths[row])
        return np.sort(self.rows[row] + self.cols[col])

    def enumerate_between(self, lo: np.ndarray, widths: np.ndarray) -> np.ndarray:
        total = int(widths.sum())
        row = np.repeat(np.arange(self.n), widths)
        offsets = np.cumsum(widths) - widths - lo
        values: np.ndarray = self.rows[row] + self.cols[np.arange(total) - np.repeat(offsets, widths)]
        return values


def _pivots(sample: np.ndarray, frac: float) -> tuple[float, float]:
    size = len(sample)
    spread = _Z_SPREAD * np.sqrt(max(frac * (1 - frac), 1.0 / size) / size)
    i_lo = min(size - 1, max(0, int(np.floor((frac - spread) * size))))
    i_hi = min(size - 1, max(0, int(np.ceil((frac + spread) * size))))
    return float(sample[i_lo]), float(sample[i_hi])


@dataclass
class _Cut:
    """A counted pivot: per row, how many entries are <= t, and their total."""

    t: float
    le: np.ndarray
    count: int


def _select(mx: _Matrix, k: int, first_sample: np.ndarray, cuts: list[_Cut]) -> float:
    """k-th smallest (0-based) entry of the matrix by pivoting, counting and finally enumerating.

    `cuts` holds every pivot counted so far (shared between order statistics of the same matrix)."""
    total = mx.n * mx.m
    lower = max((c for c in cuts if c.count <= k), key=lambda c: c.t)
    upper = min((c for c in cuts if c.count > k), key=lambda c: c.t)
    interpolate = np.isfinite(lower.t) and np.isfinite(upper.t)
    for _ in range(_MAX_ROUNDS):
        remaining, target = upper.count - lower.count, k - lower.count
        widths = upper.le - lower.le
        if remaining <= _ENUMERATE_LIMIT:
            return float(np.partition(mx.enumerate_between(lower.le, widths), target)[target])
        if interpolate and upper.t > lower.t:
            # counts are locally near-linear in t: aim two pivots just either side of the target
            step, width = _ENUMERATE_LIMIT / 4, upper.t - lower.t
            pivots = (
                lower.t + width * max(target - step, 0.0) / remaining,
                lower.t + width * min(target + step, remaining - 1.0) / remaining,
            )
        elif not (np.isfinite(lower.t) or np.isfinite(upper.t)):
            pivots = _pivots(first_sample, (k + 0.5) / total)
        else:  # interpolation stalled (ties, a skewed band): pivot on sampled candidates
            pivots = _pivots(mx.sample_between(lower.le, widths, _SAMPLE), (target + 0.5) / remaining)
        for t in pivots:
            if not lower.t < t <= upper.t:
                continue
            if t == upper.t:  # no progress from above: t is the answer, or drop the run of ties at t
                lt = mx.count_lt(t)
                below_t = int(lt.sum())
                if below_t <= k:
                    return t
                upper = _Cut(float(np.nextafter(t, -np.inf)), lt, below_t)
                cuts.append(upper)
                break
            le = mx.count_le(t)
            cut = _Cut(t, le, int(le.sum()))
            cuts.append(cut)
            if cut.count <= k:
                lower = cut
            else:
                upper = cut
                break
        interpolate = (upper.count - lower.count) * 4 <= remaining and np.isfinite(lower.t) and np.isfinite(upper.t)
    # a safety net that float rounding should never reach: enumerate what is left
    widths = upper.le - lower.le
    return float(np.partition(mx.enumerate_between(lower.le, widths), k - lower.count)[k - lower.count])


def difference_order_stats(canary: np.ndarray, baseline: np.ndarray, ks: Sequence[int], *, seed: int = 0) -> list[float]:
    """The k-th smallest (0-based) of all canary[i] - baseline[j] for each k, from sorted inputs.

    Randomised selection over the implicit sorted matrix: each pivot is counted in O((n+m) log m)."""

    # Pivots come from a sample of pairs or from interpolating counts; the last few candidates are
    # enumerated. Expected cost O((n+m) log(n+m)) per order statistic.
    n, m = len(canary), len(baseline)
    total = n * m
    for k in ks:
        if not 0 <= k < total:
            raise ValueError(f"order statistic {k} outside 0..{total - 1}")
    if total <= _ENUMERATE_LIMIT:
        values = np.partition(np.subtract.outer(canary, baseline).ravel(), sorted(set(ks)))
        return [float(values[k]) for k in ks]
    mx = _Matrix(canary, baseline, seed)
    sample = mx.sample_all(_FIRST_SAMPLE)
    cuts = [_Cut(-np.inf, np.zeros(n, dtype=np.int64), 0), _Cut(np.inf, np.full(n, m, dtype=np.int64), total)]
    return [_select(mx, k, sample, cuts) for k in ks]


def _next_difference(canary: np.ndarray, baseline: np.ndarray, value: float, k: int) -> float:
    """The (k+1)-th smallest difference given that `value` is the k-th: one counting pass."""
    mx = _Matrix(canary, baseline, 0)
    le = mx.count_le(value)
    if int(le.sum()) >= k + 2:
        return value
    open_rows = le < mx.m
    return float(np.min(mx.rows[open_rows] + mx.cols[le[open_rows]]))


def hodges_lehmann(canary: np.ndarray, baseline: np.ndarray) -> float:
    """Median of all pairwise differences canary - baseline: the Hodges-Lehmann shift estimate."""
    total = len(canary) * len(baseline)
    mid = (total - 1) // 2
    if total <= _ENUMERATE_LIMIT:
        return float(np.median(np.subtract.outer(canary, baseline)))
    first = difference_order_stats(canary, baseline, [mid])[0]
    if total % 2:
        return first
    return 0.5 * (first + _next_difference(canary, baseline, first, mid))


def shift_interval_ranks(total: int, u: UStat, confidence: float) -> tuple[int, int]:
    """0-based ranks of the pairwise differences bounding the Moses confidence interval for the shift."""
    z = float(ndtri(1 - (1 - confidence) / 2))
    c = int(np.floor(total / 2 - z * u.sigma + 0.5))
    c = min(max(c, 1), (total + 1) // 2)
    return c - 1, total - c


def shift_estimate_and_interval(
    canary: np.ndarray, baseline: np.ndarray, u: UStat, confidence: float
) -> tuple[float, tuple[float, float]]:
    """Hodges-Lehmann shift and its distribution-free (Moses) interval, sharing one set of passes."""
    total = len(canary) * len(baseline)
    k_lo, k_hi = shift_interval_ranks(total, u, confidence)
    mid = (total - 1) // 2
    if total <= _ENUMERATE_LIMIT:
        diffs = np.subtract.outer(canary, baseline).ravel()
        part = np.partition(diffs, sorted({k_lo, k_hi, mid, min(mid + 1, total - 1)}))
        hl = float(part[mid]) if total % 2 else 0.5 * float(part[mid] + part[mid + 1])
        return hl, (float(part[k_lo]), float(part[k_hi]))
    lo_v, mid_v, hi_v = difference_order_stats(canary, baseline, [k_lo, mid, k_hi])
    hl = mid_v if total % 2 else 0.5 * (mid_v + _next_difference(canary, baseline, mid_v, mid))
    return hl, (lo_v, hi_v)
