"""Latency bucket counts per interval (e.g. Prometheus `_bucket` series): the one model the region guard and the
canary judge share, and the sums over intervals both compare.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator


class Histogram(BaseModel):
    """A latency metric's buckets over a window: upper bounds `le` (ascending, finite; one more bucket above the
    last) and, per interval (oldest first), the requests in each bucket (not cumulative: len(le) + 1 each)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    le: list[float] = Field(min_length=1, max_length=200)
    counts: list[list[float]] = Field(default_factory=list)
    quantile: float = Field(default=0.99, gt=0.5, lt=1, description="the quantile the metric stands for (p99: 0.99)")

    @model_validator(mode="after")
    def _shape(self) -> Histogram:
        if any(b <= a for a, b in zip(self.le, self.le[1:])) or self.le[0] <= 0:
            raise ValueError("le: bucket bounds must be positive and strictly ascending")
        for i, row in enumerate(self.counts):
            if len(row) != len(self.le) + 1 or any(c < 0 for c in row):
                raise ValueError(f"counts[{i}]: needs {len(self.le) + 1} non-negative counts (one per bucket and "
                                 f"one above the last bound), got {len(row)}")
        return self

    def rows(self) -> np.ndarray:
        """The counts as an (intervals x buckets) array."""
        return np.array(self.counts, dtype=float).reshape(-1, len(self.le) + 1)

    def newest(self, fraction: float = 0.5) -> Histogram:
        keep = math.ceil(len(self.counts) * fraction)
        return self.model_copy(update={"counts": self.counts[len(self.counts) - keep:]})


@dataclass(frozen=True)
class Pooled:
    """Bucket counts summed over intervals (and regions or days): every request once."""

    le: tuple[float, ...]
    counts: np.ndarray
    quantile: float

    @staticmethod
    def of(h: Histogram) -> Pooled:
        rows = np.array(h.counts, dtype=float).reshape(-1, len(h.le) + 1)
        return Pooled(tuple(h.le), rows.sum(axis=0), h.quantile)

    def plus(self, other: Pooled | None) -> Pooled | None:
        if other is None or other.le != self.le or other.quantile != self.quantile:
            return None
        return Pooled(self.le, self.counts + other.counts, self.quantile)

    @property
    def total(self) -> float:
        return float(self.counts.sum())

    def value(self, q: float | None = None) -> float:
        """The quantile by linear interpolation inside its bucket (as Prometheus' histogram_quantile)."""
        rank = (self.quantile if q is None else q) * self.total
        cum = np.cumsum(self.counts)
        i = int(np.searchsorted(cum, rank, side="left"))
        if i >= len(self.le):
            return self.le[-1]
        lo, before = (self.le[i - 1], float(cum[i - 1])) if i > 0 else (0.0, 0.0)
        inside = float(self.counts[i])
        return lo + (self.le[i] - lo) * ((rank - before) / inside if inside > 0 else 1.0)

    def above(self, line: float) -> float:
        """Requests above `line`, spread evenly on a log scale inside its bucket (linearly in the first): measured,
        a region at exactly the gate is then found worse at about the test's level (linearly, at 2.7x it)."""
        i = int(np.searchsorted(np.array(self.le), line, side="left"))
        if i >= len(self.le):
            return float(self.counts[-1]) if line <= self.le[-1] else 0.0
        lo = self.le[i - 1] if i > 0 else 0.0
        share = (math.log(self.le[i] / line) / math.log(self.le[i] / lo) if lo > 0 and line > lo
                 else (self.le[i] - line) / (self.le[i] - lo))
        inside = float(self.counts[i]) * share
        return float(self.counts[i + 1:].sum()) + max(0.0, inside)


def weights_above(le: tuple[float, ...] | list[float], line: float) -> np.ndarray:
    """Per bucket, the share of its requests above `line`: 1 above the line's bucket, 0 below it, and inside it the
    share spread evenly on a log scale (linearly in the first bucket), as `Pooled.above` counts."""
    bounds = np.asarray(le, dtype=float)
    w = np.zeros(len(bounds) + 1)
    i = int(np.searchsorted(bounds, line, side="left"))
    w[i + 1:] = 1.0
    if i >= len(bounds):
        w[-1] = 1.0 if line <= bounds[-1] else 0.0
        return w
    lo = float(bounds[i - 1]) if i > 0 else 0.0
    hi = float(bounds[i])
    w[i] = (math.log(hi / line) / math.log(hi / lo) if lo > 0 and line > lo else (hi - line) / (hi - lo))
    w[i] = min(1.0, max(0.0, w[i]))
    return w
