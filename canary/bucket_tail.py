"""The upper-tail test of a latency from its buckets: are more of the canary's requests above the pooled upper
quantiles' bucket edges than the baseline's? Every request counts, not one summary per interval.

Requests within an interval are not independent (intervals differ: load, a slow dependency), so each arm's share
above a line gets a cluster-robust variance over its intervals, never below the binomial one; the p-value is the
larger of that (a t-test with Satterthwaite's degrees of freedom) and the exact conditional binomial test, each
valid where the other is not (overdispersed intervals; few requests above the line).
"""

# Lines: the bucket edges nearest (on a log scale) to the pooled p90, p95, p99 and p99.9, kept while the canary would
# expect at least MIN_ABOVE requests above them; the lines' one-sided p-values are Simes-combined (their counts are
# positively dependent). Counting above a bucket edge is exact, so ties at edges cost nothing. The practical
# tolerance t is a latency factor: the canary's share above a line L is compared with the baseline's share above
# L / (1 + t) (inside a bucket spread evenly on a log scale), which is the share a canary exactly (1 + t)x slower
# would have. The effect shown and gated is the ratio of the arms' quantiles at the baseline's level at that line.

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats
from scipy.special import stdtr

from canary.histogram import Histogram, Pooled, weights_above

LEVELS = (0.9, 0.95, 0.99, 0.999)  # pooled quantiles whose nearest bucket edges are the lines
MIN_ABOVE = 5.0  # a line is tested when the canary would expect at least this many requests above it


@dataclass(frozen=True)
class BucketTail:
    """The tail test's outcome: its p-value, and the line that carries it with both arms' shares and volumes."""

    p: float
    line: float  # the bucket edge (ms or s, as the buckets are)
    level: float  # the pooled quantile the line stands for (0.99: p99)
    share_c: float  # canary requests above the line / canary requests
    share_b: float  # baseline requests above the line (before the tolerance) / baseline requests
    n_c: int
    n_b: int
    intervals: tuple[int, int]  # (canary, baseline) intervals that served requests
    ratio: float  # canary / baseline quantile at the baseline's level at the line: the effect
    lines: int  # how many lines were tested (Simes over them)

    def text(self) -> str:
        """The finding in words, with values and volumes."""
        return (f"{self.share_c:.2%} of canary requests above {self.line:.4g} (the pooled p{self.level * 100:g} "
                f"bucket edge) vs {self.share_b:.2%} of baseline's (n {self.n_c} vs {self.n_b} requests in "
                f"{self.intervals[0]} vs {self.intervals[1]} intervals; quantile there {self.ratio:.2f}x)")


def _lines(pooled: Pooled, expected_n: float) -> list[tuple[int, float]]:
    """(index of the edge in `le`, level) per line: the edges nearest the pooled upper quantiles, deduplicated."""
    out: dict[int, float] = {}
    le = np.asarray(pooled.le)
    for level in LEVELS:
        if (1 - level) * expected_n < MIN_ABOVE:
            break
        q = pooled.value(level)
        if q <= 0:
            continue
        i = int(np.argmin(np.abs(np.log(le / q))))
        above = float(pooled.counts[i + 1:].sum()) / max(pooled.total, 1.0)
        if i not in out and above * expected_n >= MIN_ABOVE:
            out[i] = level
    return sorted(out.items())


def _robust_var(k: np.ndarray, n: np.ndarray, share: float, floor: float) -> tuple[float, int]:
    """Variance of an arm's share above a line from its intervals (cluster-robust), at least `floor`; and the
    number of intervals that served requests."""
    served = n > 0
    m = int(served.sum())
    total = float(n.sum())
    if m < 2 or total <= 0:
        return floor, m
    resid = k[served] - share * n[served]
    robust = m / (m - 1) * float(resid @ resid) / total**2
    return max(robust, floor), m


def _line_p(rc: np.ndarray, rb: np.ndarray, edge: int, line: float, le: tuple[float, ...],
            tolerance: float) -> tuple[float, float, float]:
    """One-sided p-value at one line, and the arms' raw shares above it."""
    n_c, n_b = rc.sum(axis=1), rb.sum(axis=1)
    k_c = rc[:, edge + 1:].sum(axis=1)
    k_b_raw = rb[:, edge + 1:].sum(axis=1)
    k_b = rb @ weights_above(le, line / (1 + tolerance)) if tolerance > 0 else k_b_raw
    N_c, N_b = float(n_c.sum()), float(n_b.sum())
    s_c, s_b = float(k_c.sum()) / N_c, float(k_b.sum()) / N_b
    p0 = (float(k_c.sum()) + float(k_b.sum())) / (N_c + N_b)
    v_c, m_c = _robust_var(k_c, n_c, s_c, p0 * (1 - p0) / N_c)
    v_b, m_b = _robust_var(k_b, n_b, s_b, p0 * (1 - p0) / N_b)
    v = v_c + v_b
    if v <= 0:
        return 1.0, s_c, float(k_b_raw.sum()) / N_b
    df = v * v / (v_c * v_c / max(1, m_c - 1) + v_b * v_b / max(1, m_b - 1))
    p_t = float(stdtr(df, -(s_c - s_b) / math.sqrt(v)))
    events_c, events = int(round(float(k_c.sum()))), int(round(float(k_c.sum() + k_b.sum())))
    p_exact = float(stats.binom.sf(events_c - 1, events, N_c / (N_c + N_b))) if events_c > 0 else 1.0
    return max(p_t, p_exact), s_c, float(k_b_raw.sum()) / N_b


def bucket_tail_test(canary: Histogram, baseline: Histogram, tolerance: float = 0.0) -> BucketTail | None:
    """p-value for 'more of the canary's requests lie above the pooled upper quantiles' bucket edges than the
    baseline's' (beyond the tolerance); None when there is nothing to test (no requests, different buckets, or too
    few requests above even the pooled p90 edge)."""
    if canary.le != baseline.le:
        return None
    rc, rb = canary.rows(), baseline.rows()
    pc, pb = Pooled.of(canary), Pooled.of(baseline)
    if pc.total <= 0 or pb.total <= 0:
        return None
    pooled = pc.plus(pb)
    if pooled is None:
        return None
    lines = _lines(pooled, min(pc.total, pb.total))
    if not lines:
        return None
    tested = [(_line_p(rc, rb, edge, pooled.le[edge], pooled.le, tolerance), edge, level) for edge, level in lines]
    ps = sorted(t[0][0] for t in tested)
    p = min(1.0, *(len(ps) * q / i for i, q in enumerate(ps, start=1)))
    (p_best, s_c, s_b), edge, level = min(tested, key=lambda t: t[0][0])
    at = 1 - s_b  # the baseline's level at the line: compare the arms' quantiles there
    q_b, q_c = pb.value(at), pc.value(at)
    ratio = q_c / q_b if q_b > 0 else 1.0
    served = (int((rc.sum(axis=1) > 0).sum()), int((rb.sum(axis=1) > 0).sum()))
    return BucketTail(p, pooled.le[edge], level, s_c, s_b, int(round(pc.total)), int(round(pb.total)), served,
                      ratio, len(tested))
