"""Seeded latency buckets for the judge's tests: requests of a log-normal latency (its quantiles above `start`
raised up to `factor` at `top`) counted into buckets 1.2x apart, each interval slower or faster by its own factor."""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtr

from canary.histogram import Histogram

LE = [round(10 * 1.2**k, 3) for k in range(45)]  # 10 ms .. 30 s
_Z = np.linspace(-9, 9, 4001)
_U = ndtr(_Z)


def buckets(rng: np.random.Generator, intervals: int, volume: int, *, median: float = 100.0, sigma: float = 0.25,
            jitter: float = 0.1, start: float | None = None, top: float = 0.99, factor: float = 1.5,
            le: list[float] = LE, outliers: float = 0.0) -> Histogram:
    """`intervals` rows of `volume` requests each; `jitter`: the sd of each interval's log-latency factor;
    `outliers`: the share of intervals 5x slower."""
    log_q = sigma * _Z
    if start is not None:
        log_q = log_q + np.log(1 + (factor - 1) * np.clip((_U - start) / (top - start), 0, 1))
    eps = rng.normal(0, jitter, intervals) + np.where(rng.random(intervals) < outliers, math.log(5.0), 0.0)
    x = np.log(np.array(le))[None, :] - math.log(median) - eps[:, None]
    cdf = np.interp(x, log_q, _U, left=0.0, right=1.0)
    edges = np.concatenate([np.zeros((intervals, 1)), cdf, np.ones((intervals, 1))], axis=1)
    probs = np.clip(np.diff(edges, axis=1), 0, None)
    counts = rng.multinomial(np.full(intervals, volume), probs / probs.sum(axis=1, keepdims=True))
    return Histogram(le=list(le), counts=counts.astype(float).tolist())
