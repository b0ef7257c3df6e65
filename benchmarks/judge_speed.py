"""Judge speed: 50 metrics x 10,000 samples per side, on one core, against straightforward root finding.

Run: .venv/bin/python benchmarks/judge_speed.py"""

# The comparison re-ranks the pooled sample (scipy.stats.rankdata) at every step of scipy's brentq,
# for each interval end and the estimate: the textbook port of R's wilcox.test interval.

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from scipy.optimize import brentq  # noqa: E402
from scipy.special import ndtri  # noqa: E402
from scipy.stats import mannwhitneyu, rankdata  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from canary.config import JudgeConfig, MetricSamples, MetricSpec  # noqa: E402
from canary.judge import judge  # noqa: E402

METRICS, SAMPLES = 50, 10_000
GOAL_SECONDS = 0.5


def make_data(seed: int = 1) -> tuple[list[MetricSpec], list[MetricSamples]]:
    """A mix of latency (log-normal), error-rate (binomial, tie-heavy) and gauge (normal) metrics, with their kinds
    (latency takes the tolerance and the upper-tail test, error rates no spread test; a judge from before issue 32
    ignores kinds, so the same data times both)."""
    rng = np.random.default_rng(seed)
    specs, data = [], []
    for i in range(METRICS):
        kind = i % 3
        if kind == 0:
            base, can = rng.lognormal(np.log(120), 0.25, SAMPLES), rng.lognormal(np.log(120 * (1.01 if i % 2 else 1.0)), 0.25, SAMPLES)
        elif kind == 1:
            base, can = rng.binomial(2000, 0.005, SAMPLES) / 2000, rng.binomial(2000, 0.005, SAMPLES) / 2000
        else:
            base, can = rng.normal(0.55, 0.03, SAMPLES), rng.normal(0.55, 0.03, SAMPLES)
        specs.append(MetricSpec(name=f"metric_{i:02d}", kind=("latency", "error_rate", "other")[kind]))  # kinds pick the tests
        data.append(MetricSamples(name=f"metric_{i:02d}", baseline=base.tolist(), canary=can.tolist()))
    return specs, data


def straightforward(canary: np.ndarray, baseline: np.ndarray, conf: float = 0.95) -> tuple[float, float, float, float]:
    """The textbook port: re-rank the pooled sample at every step of a bracketing root finder."""
    n, m = len(canary), len(baseline)

    def wdiff(mu: float, zq: float) -> float:
        ranks = rankdata(np.concatenate([canary - mu, baseline]))
        dz = ranks[:n].sum() - n * (n + 1) / 2 - n * m / 2
        _, ties = np.unique(ranks, return_counts=True)
        sigma = np.sqrt(n * m / 12 * ((n + m + 1) - (ties**3 - ties).sum() / ((n + m) * (n + m - 1))))
        return (dz - np.sign(dz) * 0.5) / sigma - zq

    lo_mu, hi_mu = canary.min() - baseline.max(), canary.max() - baseline.min()
    z = float(-ndtri((1 - conf) / 2))

    def root(zq: float) -> float:
        f_lo, f_hi = wdiff(lo_mu, zq), wdiff(hi_mu, zq)
        if f_lo <= 0:
            return lo_mu
        if f_hi >= 0:
            return hi_mu
        return brentq(wdiff, lo_mu, hi_mu, args=(zq,), xtol=1e-4)

    p = mannwhitneyu(canary, baseline, alternative="greater").pvalue
    return float(p), root(z), root(-z), root(0.0)


def one_core() -> str:
    try:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
        return "pinned to one CPU"
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return "not pinned (no sched_setaffinity)"


def main() -> None:
    pinned = one_core()
    specs, data = make_data()
    print(f"Judge speed: {METRICS} metrics x {SAMPLES:,} samples per side ({pinned})")
    config = JudgeConfig(mode="bifrost")
    judge(config, specs[:3], data[:3])  # warm-up (imports, caches)
    times = []
    for _ in range(5):
        t = time.perf_counter()
        result = judge(config, specs, data)
        times.append(time.perf_counter() - t)
    best = min(times)
    print(f"  bifrost mode  : best {best:.3f} s, median {np.median(times):.3f} s of {len(times)} runs  (goal <= {GOAL_SECONDS} s: {'met' if best <= GOAL_SECONDS else 'MISSED'})")
    flagged = sum(m.classification != "Pass" for m in result.metrics)
    small = sum(m.classification == "Pass" and m.p_value is not None and m.threshold is not None and m.p_value <= m.threshold for m in result.metrics)
    print(f"                  verdict {result.verdict}: {flagged} metrics flagged, {small} significant but within the allowed 5% (the +1% latency shifts)")
    t = time.perf_counter()
    judge(JudgeConfig(mode="kayenta"), specs, data)
    kay = time.perf_counter() - t
    print(f"  kayenta mode  : {kay:.2f} s (zeroin on a rank function evaluated by binary search, O((n+m) log) per step)")
    t = time.perf_counter()
    for d in data:
        straightforward(np.asarray(d.canary), np.asarray(d.baseline))
    naive = time.perf_counter() - t
    print(f"  straightforward per-metric root finding (rankdata + brentq): {naive:.2f} s")
    print(f"  ratio straightforward / bifrost: {naive / best:.0f}x; kayenta mode / bifrost: {kay / best:.0f}x")


if __name__ == "__main__":
    main()
