"""A fleet model for the region guard's benchmarks: each region in its own time zone with a 10x day/night swing in
requests, every interval's latency p99 computed from that interval's requests (and, unless `buckets` is off, the
interval's latency histogram: its requests counted into buckets 2^(1/4) apart, as a fine Prometheus histogram),
errors binomial over them.

Used by benchmarks/guard_shapes.py, which drives the guard's own decision code (canary.guard.look_fleet, Streak,
workflows.guard.rules) look by look on this model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.special import ndtr, ndtri

from canary.guard import RegionSamples
from canary.guard_counts import Histogram

DAY = 86_400.0
INTERVAL = 3.0  # seconds between samples (the guard's default)
LE = [round(10 * 2 ** (k / 4), 3) for k in range(45)]  # 10 ms to 24 s, each bound 1.19x the last
Draw = tuple[list[float], list[float], list[float], list[list[float]]]


@dataclass
class FleetModel:
    """`peak`: requests per interval at the busiest hour (a tenth at the quietest, 14:00 and 02:00 local time)."""

    rng: np.random.Generator
    peak: float = 1500.0
    tz_hours: tuple[float, ...] = (-5.0, 1.0, 5.5)
    base_latency_ms: float = 120.0
    sigma: float = 0.5
    base_error_rate: float = 0.002
    nan_replace: bool = False  # a metric source configured with nan_strategy: replace (NaN -> 0)
    chronic: dict[int, float] = field(default_factory=dict)  # region -> standing error factor, in history too
    buckets: bool = True  # the source gives latency histograms (off: a p99 per interval only)

    @property
    def names(self) -> list[str]:
        return [f"r{i}" for i in range(len(self.tz_hours))]

    def volume(self, i: int, t: np.ndarray) -> np.ndarray:
        hour = (t / 3600.0 + self.tz_hours[i]) % 24
        return self.peak * (0.1 + 0.9 * (1 + np.cos(2 * math.pi * (hour - 14) / 24)) / 2)

    def draw(self, i: int, start: float, n: int, *, share: float = 1.0, error_factor: float = 1.0,
             latency_factor: float = 1.0, since: float = -math.inf) -> Draw:
        """(latency p99s, error rates, requests, latency buckets) of `n` intervals from `start` (seconds); the
        factors apply to the intervals from `since` on. The p99 and the buckets are two views of the same
        requests' law, drawn independently (a benchmark judges one or the other)."""
        t = start + INTERVAL * np.arange(n)
        req = self.rng.poisson(self.volume(i, t) * share) if share > 0 else np.zeros(n, dtype=int)
        factor = np.where(t >= since, error_factor, 1.0) * self.chronic.get(i, 1.0)
        errors = self.rng.binomial(req, np.minimum(1.0, self.base_error_rate * factor))
        empty = 0.0 if self.nan_replace else math.nan
        with np.errstate(invalid="ignore", divide="ignore"):
            rate = np.where(req > 0, errors / np.maximum(req, 1), empty)
        lat = np.where(t >= since, latency_factor, 1.0)
        p99 = np.where(req > 0, self._p99(req, lat), empty)
        hist = self._buckets(req, lat).tolist() if self.buckets else []
        return p99.tolist(), rate.tolist(), req.astype(float).tolist(), hist

    def _buckets(self, req: np.ndarray, latency_factor: np.ndarray) -> np.ndarray:
        """Each interval's requests counted into the LE buckets (and one above), from the log-normal law."""
        mu = np.log(self.base_latency_ms * latency_factor) - self.sigma**2 / 2
        cdf = ndtr((np.log(np.array(LE))[None, :] - mu[:, None]) / self.sigma)
        probs = np.diff(np.concatenate([np.zeros((len(req), 1)), cdf, np.ones((len(req), 1))], axis=1), axis=1)
        out: np.ndarray = self.rng.multinomial(req, np.clip(probs, 0, None))
        return out

    def _p99(self, req: np.ndarray, latency_factor: np.ndarray) -> np.ndarray:
        """The R-7 p99 of `req` log-normal latencies, drawn exactly from the order statistics' Beta laws."""
        n = np.maximum(req, 1)
        h = (n - 1) * 0.99
        k = np.floor(h).astype(int)
        frac = h - k
        u1 = self.rng.beta(k + 1, n - k)
        rest = np.maximum(n - k - 1, 1)
        u2 = np.where(n - k - 1 >= 1, u1 + (1 - u1) * self.rng.beta(1, rest), u1)
        mu = np.log(self.base_latency_ms * latency_factor) - self.sigma**2 / 2
        q1, q2 = np.exp(mu + self.sigma * ndtri(u1)), np.exp(mu + self.sigma * ndtri(np.minimum(u2, 1 - 1e-16)))
        out: np.ndarray = q1 + frac * (q2 - q1)
        return out


@dataclass
class Window:
    """One region's sliding window of samples (the look's `window` intervals, `per_look` new at every look)."""

    size: int
    p99: list[float] = field(default_factory=list)
    err: list[float] = field(default_factory=list)
    req: list[float] = field(default_factory=list)
    hist: list[list[float]] = field(default_factory=list)

    def push(self, got: Draw) -> None:
        self.p99, self.err, self.req, self.hist = ((old + new)[-self.size:] for old, new in
                                                   zip((self.p99, self.err, self.req, self.hist), got))

    def samples(self, region: str, history: list[RegionSamples] | None = None) -> RegionSamples:
        return samples(region, (self.p99, self.err, self.req, self.hist), history or [])


def samples(region: str, got: Draw, history: list[RegionSamples]) -> RegionSamples:
    p99, err, req, hist = got
    return RegionSamples(region=region, metrics={"latency_p99": p99, "error_rate": err}, requests=req, history=history,
                         histograms={"latency_p99": Histogram.model_construct(le=LE, counts=hist, quantile=0.99)}
                         if hist else {})


def history(model: FleetModel, i: int, end: float, size: int, days: int) -> list[RegionSamples]:
    """The same window on each of `days` earlier days: the region as it usually is (its chronic factor only)."""
    out = []
    for d in range(1, days + 1):
        out.append(samples(model.names[i], model.draw(i, end - d * DAY - size * INTERVAL, size), []))
    return out
