"""Judge quality: false alarms and detection on seeded simulations, bifrost and kayenta modes side by side.

Run: .venv/bin/python benchmarks/judge_quality.py [--quick]"""

# Metrics are simulated per interval (one sample per metric per minute, as the simulated fleet does):
# latency is log-normal, error rates are binomial counts over a request volume divided by the volume.

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.stats import binomtest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from canary.config import JudgeConfig, MetricSamples, MetricSpec  # noqa: E402
from canary.judge import (
    judge,  # noqa: E402
    soak_look,  # noqa: E402
)

SAMPLES = 60  # per side per analysis: an hour of one-minute intervals
LOOK_SAMPLES = 10  # soak looks every 10 minutes (the workflow's default soak_check_minutes)
LOOKS = 60
ERROR_VOLUME = 2000  # requests per interval behind the error-rate metrics
SPARSE_VOLUME = 1000  # requests per interval behind the zero-heavy error metric


@dataclass(frozen=True)
class Model:
    """How one metric is simulated: draw(rng, n, factor) with factor 1.0 for a healthy version."""

    spec: MetricSpec
    draw: Callable[[np.random.Generator, int, float], np.ndarray]


def lognormal(median: float, sigma: float) -> Callable[[np.random.Generator, int, float], np.ndarray]:
    return lambda rng, n, f: rng.lognormal(math.log(median * f), sigma, n)


def rate(p: float, volume: int) -> Callable[[np.random.Generator, int, float], np.ndarray]:
    return lambda rng, n, f: rng.binomial(volume, min(1.0, p * f), n) / volume


def normal(mean: float, sd: float) -> Callable[[np.random.Generator, int, float], np.ndarray]:
    return lambda rng, n, f: rng.normal(mean * f, sd, n)


SUITE = [
    Model(MetricSpec(name="latency_p50_ms", kind="latency", groups=["latency"]), lognormal(120, 0.10)),
    Model(MetricSpec(name="latency_p90_ms", kind="latency", groups=["latency"]), lognormal(250, 0.15)),
    Model(MetricSpec(name="latency_p99_ms", kind="latency", groups=["latency"]), lognormal(600, 0.25)),
    Model(MetricSpec(name="error_rate", kind="error_rate", groups=["errors"]), rate(0.005, ERROR_VOLUME)),
    Model(MetricSpec(name="error_rate_5xx_sparse", kind="error_rate", groups=["errors"]), rate(0.0005, SPARSE_VOLUME)),
    Model(MetricSpec(name="timeout_rate", kind="error_rate", groups=["errors"]), rate(0.001, ERROR_VOLUME)),
    Model(MetricSpec(name="cpu_utilization", kind="saturation", groups=["saturation"]), normal(0.55, 0.03)),
    Model(MetricSpec(name="memory_mb", kind="saturation", groups=["saturation"]), normal(900, 20)),
    Model(MetricSpec(name="gc_pause_ms", kind="saturation", groups=["saturation"]), lognormal(15, 0.30)),
    Model(MetricSpec(name="throughput_rps", kind="throughput", direction="decrease", groups=["throughput"]), normal(2000, 60)),
]
SPECS = [m.spec for m in SUITE]


@dataclass(frozen=True)
class Scenario:
    """Which metrics change in the canary, by what factor; `mix` replaces a share of intervals instead."""

    name: str
    factors: dict[str, float] = field(default_factory=dict)
    mix: dict[str, tuple[float, float]] = field(default_factory=dict)  # metric -> (share of intervals, factor)


def draw_side(rng: np.random.Generator, n: int, scenario: Scenario | None) -> list[np.ndarray]:
    out = []
    for m in SUITE:
        f = scenario.factors.get(m.spec.name, 1.0) if scenario else 1.0
        values = m.draw(rng, n, f)
        if scenario and m.spec.name in scenario.mix:
            share, factor = scenario.mix[m.spec.name]
            slow = rng.random(n) < share
            values = np.where(slow, values * factor, values)
        out.append(values)
    return out


def analysis(args: tuple[str, Scenario, int, int]) -> tuple[str, dict[str, str], bool]:
    """One simulated analysis: verdict, per-metric classification, and whether the oracle rate test fires."""
    mode, scenario, n, seed = args
    rng = np.random.default_rng(seed)
    base = draw_side(rng, n, None)
    can = draw_side(rng, n, scenario)
    data = [MetricSamples(name=m.spec.name, baseline=b.tolist(), canary=c.tolist()) for m, b, c in zip(SUITE, base, can)]
    res = judge(JudgeConfig(mode=mode), SPECS, data)  # type: ignore[arg-type]
    sparse = SPECS.index(next(s for s in SPECS if s.name == "error_rate_5xx_sparse"))
    k_c = int(round(can[sparse].sum() * SPARSE_VOLUME))
    k_b = int(round(base[sparse].sum() * SPARSE_VOLUME))
    oracle = k_c + k_b > 0 and binomtest(k_c, k_c + k_b, 0.5, alternative="greater").pvalue <= 0.01 / len(SPECS)
    return res.verdict, {m.name: m.classification for m in res.metrics}, oracle


def soak(args: tuple[str, int | None, int]) -> int | None:
    """One simulated soak; returns the first alarming look (None if none). `onset`: first regressed look."""
    mode, onset, seed = args
    rng = np.random.default_rng(seed)
    regressed = Scenario("2x errors", factors={"error_rate": 2.0})
    base_parts: list[list[np.ndarray]] = []
    can_parts: list[list[np.ndarray]] = []
    for look in range(1, LOOKS + 1):
        base_parts.append(draw_side(rng, LOOK_SAMPLES, None))
        can_parts.append(draw_side(rng, LOOK_SAMPLES, regressed if onset is not None and look >= onset else None))
        data = [
            MetricSamples(
                name=m.spec.name,
                baseline=np.concatenate([p[i] for p in base_parts]).tolist(),
                canary=np.concatenate([p[i] for p in can_parts]).tolist(),
            )
            for i, m in enumerate(SUITE)
        ]
        if soak_look(JudgeConfig(mode=mode), SPECS, data, look=look, max_looks=LOOKS).alarm:  # type: ignore[arg-type]
            return look
    return None


def rate_ci(k: int, n: int) -> str:
    lo, hi = binomtest(k, n).proportion_ci(0.95, method="exact")
    return f"{k / n:6.2%} [{lo:.2%}, {hi:.2%}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (rough figures)")
    ap.add_argument("--workers", type=int, default=2)
    opts = ap.parse_args()
    q = 0.2 if opts.quick else 1.0
    reps = {"bifrost": int(4000 * q), "kayenta": int(1000 * q)}
    soak_reps = {"bifrost": int(400 * q), "kayenta": int(40 * q)}
    delay_reps = {"bifrost": int(200 * q), "kayenta": int(20 * q)}
    scenarios = [
        Scenario("A/A (no change)"),
        Scenario("+20% latency (p50, p90, p99)", factors={"latency_p50_ms": 1.2, "latency_p90_ms": 1.2, "latency_p99_ms": 1.2}),
        Scenario("2x error rate (0.5% -> 1%, 2000 req/interval)", factors={"error_rate": 2.0}),
        Scenario("2x zero-heavy errors (0.05% -> 0.1%, 1000 req/interval)", factors={"error_rate_5xx_sparse": 2.0}),
        Scenario("bimodal: 25% of intervals 2x slower (p50)", mix={"latency_p50_ms": (0.25, 2.0)}),
    ]
    watch = {
        scenarios[1].name: ["latency_p50_ms", "latency_p90_ms", "latency_p99_ms"],
        scenarios[2].name: ["error_rate"],
        scenarios[3].name: ["error_rate_5xx_sparse"],
        scenarios[4].name: ["latency_p50_ms"],
    }
    print(f"Judge quality: {len(SPECS)} metrics per analysis, {SAMPLES} samples per side, seeded simulations")
    print("Models: latency log-normal (sigma 0.10 / 0.15 / 0.25 for p50 / p90 / p99), error rates binomial")
    print(f"(0.5% and 0.1% at {ERROR_VOLUME} req/interval; zero-heavy 0.05% at {SPARSE_VOLUME} req/interval = 0.5 errors")
    print("per interval, 61% of intervals have none), cpu/memory/throughput normal, gc pauses log-normal.")
    print("'not pass' = verdict marginal, fail or insufficient_data (the canary is held); 95% Clopper-Pearson CIs.\n")
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=opts.workers) as pool:
        for sc in scenarios:
            print(f"== {sc.name}")
            for mode in ("bifrost", "kayenta"):
                runs = list(pool.map(analysis, [(mode, sc, SAMPLES, 10_000 * i + 7) for i in range(reps[mode])], chunksize=20))
                n = len(runs)
                not_pass = sum(v != "pass" for v, _, _ in runs)
                fail = sum(v == "fail" for v, _, _ in runs)
                line = f"  {mode:8s} n={n:5d}  not pass {rate_ci(not_pass, n)}   fail {rate_ci(fail, n)}"
                print(line)
                for metric in watch.get(sc.name, []):
                    hit = sum(c[metric] in ("High", "Low") for _, c, _ in runs)
                    print(f"           {metric:22s} flagged {rate_ci(hit, n)}")
                if sc.name == scenarios[3].name and mode == "bifrost":
                    oracle = sum(o for _, _, o in runs)
                    print(f"           oracle: exact binomial test on error totals (knows the volume), one-sided at 0.1%: {rate_ci(oracle, n)}")
                    for longer in (120, 240):
                        more = list(pool.map(analysis, [(mode, sc, longer, 20_000 * i + 3) for i in range(reps[mode] // 4)], chunksize=20))
                        hit = sum(c["error_rate_5xx_sparse"] in ("High", "Low") for _, c, _ in more)
                        orc = sum(o for _, _, o in more)
                        print(f"           with {longer} samples per side ({longer // 60} h): flagged {rate_ci(hit, len(more))}; oracle {rate_ci(orc, len(more))}")
                if sc.name == scenarios[0].name:
                    fp = {m: sum(c[m] in ("High", "Low") for _, c, _ in runs) for m in (s.name for s in SPECS)}
                    worst = max(fp, key=fp.__getitem__)
                    print(f"           per-metric false flags: total {sum(fp.values())} of {n * len(SPECS)}; most: {worst} ({fp[worst]})")
        print(f"\n== Soak monitoring: {LOOKS} looks, {LOOK_SAMPLES} new samples per side per look ({LOOKS * LOOK_SAMPLES // 60} h), all {len(SPECS)} metrics")
        for mode in ("bifrost", "kayenta"):
            alarms = list(pool.map(soak, [(mode, None, 500_000 + i) for i in range(soak_reps[mode])]))
            k = sum(a is not None for a in alarms)
            print(f"  {mode:8s} A/A soaks n={len(alarms):4d}: any false alarm {rate_ci(k, len(alarms))}")
        for mode in ("bifrost", "kayenta"):
            onsets = [int(x) for x in np.random.default_rng(99).integers(15, 46, delay_reps[mode])]
            found = list(pool.map(soak, [(mode, o, 900_000 + i) for i, o in enumerate(onsets)]))
            delays = [f - o + 1 for f, o in zip(found, onsets) if f is not None and f >= o]
            early = sum(f is not None and f < o for f, o in zip(found, onsets))
            missed = sum(f is None for f in found)
            if delays:
                d = np.array(delays)
                print(
                    f"  {mode:8s} 2x error-rate onset at look 15-45, n={len(onsets)}: caught {len(delays)}, "
                    f"alarm before onset {early}, missed {missed}; looks from onset to alarm (1 = the first look with "
                    f"regressed data): median {np.median(d):.0f}, p90 {np.percentile(d, 90):.0f}, max {d.max()} "
                    f"(= {np.median(d) * LOOK_SAMPLES:.0f} / {np.percentile(d, 90) * LOOK_SAMPLES:.0f} min)"
                )
            else:
                print(f"  {mode:8s} 2x error-rate onset: caught none (alarm before onset {early}, missed {missed})")
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
