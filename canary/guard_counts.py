"""Volume-aware comparisons for the region guard: one metric of one region against one reference (its peers, or its
own history at the same time of day), each interval weighted by the requests it served.

- An **error rate** is pooled into counts (errors = rate x requests, summed over the window) and compared with the
  exact conditional test of two Poisson rates: given the errors of both sides, the region's share of them is
  binomial with the region's share of the requests. A region with 15 requests weighs 15, not as much as one with
  1,500; all-zero windows give no evidence instead of a spurious one.
- A **latency histogram** (the source's bucket counts, e.g. Prometheus `_bucket` series) is pooled over the window's
  intervals, every request counting once. The reference's p99 (from its pooled buckets) times the gate is the line:
  the region is worse when significantly more than 1 % of its requests are above it (a binomial test over all its
  requests; inside the bucket the line falls in, requests are spread evenly on a log scale, which keeps a region
  at exactly 1.2x rejected at about the test's level), so 15 requests weigh 15 and 1,500 weigh 1,500.
- A **percentile** (latency p99) without buckets computed from few requests is not comparable with one from many:
  only intervals with at least `min_requests` requests count, compared on their log means (Welch, sample sizes
  carried).
- An interval that served no requests counts for nothing, whatever its value (a NaN replaced by 0 is not a sample).

A comparison is "worse" (significant at `level` and past the metric's effect gate), "not worse" (with enough data
to have seen the gate's rise), or "no data" (too few requests to tell, and how many it would need).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

import numpy as np
from scipy import stats

from canary.config import MetricSpec
from canary.histogram import Histogram as Histogram  # the one model of bucket counts (the canary judge reads it too)
from canary.histogram import Pooled as Pooled

ERROR_GATE = 1.5  # an error rate counts when 1.5x its reference (the spec's allowed_increase wins)
OTHER_GATE = 1.2  # a latency (or other metric) counts when 1.2x its reference
State = Literal["worse", "not_worse", "no_data"]


TAIL_RISE = 3.0  # "enough requests to tell" a latency: a region with 3x the usual share above the line shows


@dataclass(frozen=True)
class Side:
    """One side of a comparison: the metric's value and the requests served in each interval (aligned), and its
    pooled latency buckets when the source gives them (None: it does not, or sides with different buckets)."""

    values: list[float] = field(default_factory=list)
    requests: list[float] = field(default_factory=list)
    hist: Pooled | None = None
    empty: bool = True  # nothing added yet (pooling starts here)

    def plus(self, other: Side) -> Side:
        hist = other.hist if self.empty else (self.hist.plus(other.hist) if self.hist is not None else None)
        return Side(self.values + other.values, self.requests + other.requests, hist, self.empty and other.empty)

    def served(self) -> float:
        """Requests served in the intervals that have a value."""
        return float(sum(n for v, n in zip(self.values, self.requests) if n > 0 and math.isfinite(v)))


@dataclass(frozen=True)
class Comparison:
    state: State
    text: str
    ratio: float | None = None
    p_value: float | None = None


def gate(spec: MetricSpec) -> float:
    default = ERROR_GATE if spec.kind == "error_rate" else OTHER_GATE
    return spec.allowed_increase or default


def _z(level: float) -> float:
    return float(stats.norm.isf(level))


def counts(side: Side) -> tuple[int, float]:
    """(events, requests) over the intervals that served requests: rate x requests, rounded to whole events."""
    events, served = 0.0, 0.0
    for v, n in zip(side.values, side.requests):
        if n > 0 and math.isfinite(v):
            events, served = events + max(0.0, v) * n, served + n
    return int(round(events)), served


def compare_rate(spec: MetricSpec, region: Side, ref: Side, level: float) -> Comparison:
    """A rate metric as pooled counts: the exact conditional test of the region's rate against the reference's."""
    e_r, n_r = counts(region)
    e_p, n_p = counts(ref)
    m = gate(spec)
    if n_r <= 0:
        return Comparison("no_data", f"{spec.name}: no requests served")
    if n_p <= 0:
        return Comparison("no_data", f"{spec.name}: the reference served no requests")
    rate_r, rate_p = e_r / n_r, e_p / n_p
    ratio = rate_r / rate_p if rate_p > 0 else (math.inf if e_r > 0 else 1.0)
    total = e_r + e_p
    p = float(stats.binom.sf(e_r - 1, total, n_r / (n_r + n_p))) if total > 0 else 1.0
    text = (f"{spec.name} {rate_r:.3g} ({e_r} in {n_r:.0f} requests) vs {rate_p:.3g} ({e_p} in {n_p:.0f}): "
            f"x{ratio:.2f}, p {p:.2g}")
    if p <= level and ratio >= m:
        return Comparison("worse", text, ratio, p)
    # enough data to have seen the gate's rise: expected errors at m x the reference rate past (z / ln m)^2
    needed_events = (_z(level) / math.log(m)) ** 2 if m > 1 else math.inf
    per_request = max(rate_p, 0.5 / n_p) * m
    if n_r * per_request < needed_events:
        need = math.ceil(needed_events / per_request)
        return Comparison("no_data", f"{text}; not enough requests to tell a x{m:g} rise: needs about {need}", ratio, p)
    return Comparison("not_worse", text, ratio, p)


def _kept(side: Side, min_requests: float) -> np.ndarray:
    """Values of the intervals with at least `min_requests` requests (all finite values when volume is unknown)."""
    if side.requests:
        vals = [v for v, n in zip(side.values, side.requests) if n >= min_requests and math.isfinite(v)]
    else:
        vals = [v for v in side.values if math.isfinite(v)]
    return np.array(vals, dtype=float)


def compare_level(spec: MetricSpec, region: Side, ref: Side, level: float, *, min_requests: float,
                  min_samples: int) -> Comparison:
    """A level metric (latency p99, saturation): intervals of enough requests, log means for latency (Welch)."""
    r, p = _kept(region, min_requests), _kept(ref, min_requests)
    if spec.kind == "latency":
        r, p = np.log(r[r > 0]), np.log(p[p > 0])
    if len(r) < min_samples or len(p) < min_samples:
        return Comparison("no_data", f"{spec.name}: {len(r)} vs {len(p)} intervals of at least {min_requests:g} "
                                     f"requests; needs {min_samples} a side")
    diff = float(r.mean() - p.mean())
    if spec.kind == "latency":
        ratio = math.exp(diff)
    else:
        ratio = float(r.mean() / p.mean()) if p.mean() != 0 else (math.inf if diff > 0 else 1.0)
    if np.ptp(np.concatenate([r, p])) == 0:
        p_up = p_down = 1.0
    else:
        p_up = float(stats.ttest_ind(r, p, equal_var=False, alternative="greater").pvalue)
        p_down = float(stats.ttest_ind(r, p, equal_var=False, alternative="less").pvalue)
    inverse = 1 / ratio if ratio > 0 else math.inf
    if spec.direction == "increase":
        pv, effect = p_up, ratio
    elif spec.direction == "decrease":
        pv, effect = p_down, inverse
    else:
        pv, effect = min(1.0, 2 * min(p_up, p_down)), max(ratio, inverse)
    text = f"{spec.name} x{ratio:.2f} ({len(r)} vs {len(p)} intervals), p {pv:.2g}"
    if pv <= level and effect >= gate(spec):
        return Comparison("worse", text, ratio, pv)
    return Comparison("not_worse", text, ratio, pv)


@lru_cache(maxsize=256)
def requests_to_tell(level: float, tail: float) -> int:
    """The fewest requests at which TAIL_RISE x the usual `tail` above the line is significant at `level` (the
    binomial's median count): fewer cannot tell a clear rise from chance."""
    def tells(n: int) -> bool:
        return float(stats.binom.sf(math.ceil(TAIL_RISE * tail * n) - 1, n, tail)) <= level
    lo, hi = 1, 8
    while not tells(hi):
        lo, hi = hi, hi * 2
        if hi > 10**9:
            return hi
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if tells(mid) else (mid + 1, hi)
    return hi


def compare_hist(spec: MetricSpec, region: Pooled, ref: Pooled, level: float) -> Comparison:
    """A latency from pooled buckets: the requests above gate x the reference's quantile, against the share a
    region at exactly that quantile would have (1 % for a p99), by the exact binomial test over its requests."""
    tail, m = 1 - region.quantile, gate(spec)
    n_r, n_p = int(round(region.total)), ref.total
    if n_r <= 0:
        return Comparison("no_data", f"{spec.name}: no requests in its histogram")
    if n_p < 10 / tail:
        return Comparison("no_data", f"{spec.name}: the reference's histogram has {n_p:.0f} requests; needs "
                                     f"{10 / tail:.0f} to place its p{region.quantile * 100:g}")
    q_r, q_p = region.value(), ref.value()
    line = m * q_p
    if line > region.le[-1]:
        return Comparison("no_data", f"{spec.name}: the buckets end at {region.le[-1]:g}, below x{m:g} the "
                                     f"reference's {q_p:.4g}; add higher buckets")
    k = int(round(region.above(line)))
    p = float(stats.binom.sf(k - 1, n_r, tail)) if k > 0 else 1.0
    ratio = q_r / q_p if q_p > 0 else 1.0
    text = (f"{spec.name} {q_r:.4g} vs {q_p:.4g} (buckets of {n_r} and {n_p:.0f} requests): x{ratio:.2f}; {k} "
            f"above x{m:g} ({line:.4g}) where {tail * n_r:.1f} are allowed, p {p:.2g}")
    if p <= level:
        return Comparison("worse", text, ratio, p)
    need = requests_to_tell(level, tail)
    if n_r < need:
        return Comparison("no_data", f"{text}; not enough requests to tell: needs about {need} (to see "
                                     f"{TAIL_RISE:g}x the usual {tail:.0%} above x{m:g} its reference)", ratio, p)
    return Comparison("not_worse", text, ratio, p)


def compare(spec: MetricSpec, region: Side, ref: Side, level: float, *, min_requests: float,
            min_samples: int) -> Comparison:
    """One metric of a region against a reference, by the metric's kind (a latency from buckets when both sides
    have them)."""
    if spec.kind == "error_rate":
        return compare_rate(spec, region, ref, level)
    if spec.kind == "latency" and spec.direction == "increase" and region.hist is not None and ref.hist is not None \
            and region.hist.le == ref.hist.le:
        return compare_hist(spec, region.hist, ref.hist, level)
    return compare_level(spec, region, ref, level, min_requests=min_requests, min_samples=min_samples)


def slo_breach(spec: MetricSpec, region: Side, limit: float, level: float, min_samples: int) -> str | None:
    """Why the region is past an absolute SLO over the window, or None. An error rate must be confidently above
    the limit (binomial over its requests); a level metric's mean over intervals that served requests."""
    if spec.kind == "error_rate":
        e, n = counts(region)
        if n > 0 and e / n > limit and float(stats.binom.sf(e - 1, int(round(n)), min(1.0, limit))) <= level:
            return f"{spec.name}: {e / n:.4g} ({e} in {n:.0f} requests) above the SLO {limit:.4g}"
        return None
    vals = _kept(region, 1)
    if len(vals) >= min_samples and float(vals.mean()) > limit:
        return f"{spec.name}: mean {float(vals.mean()):.4g} above the SLO {limit:.4g}"
    return None
