"""Judge over whole rollouts: how often a good release is rolled back, how soon a bad one is caught, at what cost.

Run: .venv/bin/python benchmarks/judge_rollout.py [--seed 21] [--rollouts 2000] [--workers 2] [--judge both]
     [--buckets off|on]

`--buckets on`: every latency metric also reports its requests' buckets per interval (REQUESTS a minute from a
per-request law of the metric's median, each interval slower or faster by its own factor: overdispersed), binned
1.2x apart; the scenarios ending in `_prom` bin them in Prometheus' default buckets instead.

Each simulated rollout has six stages, in the planner's order for three regions (test, prod, test, prod, ...).
A stage is a canary analysis (60 one-minute samples per side; the sequential judge may extend it with fresh
samples) and a 1-hour soak looked at every 5 minutes (cumulative samples). `today` is the judge before issue
21: one fixed analysis at `alpha` and a soak at `alpha`; `sequential` is canary.sequential.decide with the
stage's place in the rollout, and the soak spending its share of `rollout_alpha`. Goals are issue 21's.
"""

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
from scipy.special import ndtr, ndtri
from scipy.stats import beta

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from canary.config import JudgeConfig, MetricSamples, MetricSpec  # noqa: E402
from canary.histogram import Histogram  # noqa: E402
from canary.judge import judge, soak_look  # noqa: E402

try:
    from canary.config import StagePlace
    from canary.sequential import decide
except ImportError:  # measuring a checkout from before issue 21 (`--judge today` only)
    decide = None  # type: ignore[assignment]

STAGES = 6
PROD = {1, 3, 5}  # stage indexes that are production in the planner's order (test, prod per region)
SAMPLES = 60  # per side per analysis: an hour of one-minute intervals
SOAK_SAMPLES = 60  # a 1-hour soak of one-minute intervals ...
LOOK_EVERY = 5  # ... looked at every 5 minutes: 12 looks
VOLUME = 2000  # requests per interval behind an error rate
ERROR_P = 0.002  # 4 errors per interval on average: many ties

Draw = Callable[[np.random.Generator, int], np.ndarray]
REQUESTS = 600  # requests per one-minute interval behind a latency's buckets (10 per second)
LE = tuple(round(1.2**k, 4) for k in range(61))  # ms, 1.2x apart: 1 ms .. 56 s
PROM_LE = (5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0)  # the client default, in ms
_Z = np.linspace(-9.0, 9.0, 3001)
_U = ndtr(_Z)


@dataclass(frozen=True)
class Requests:
    """A latency's per-request law: log-normal (or Pareto `pareto` with scale `median`), its quantiles above
    tail[0] raised up to tail[2]x at tail[1]; each interval's requests x exp(N(0, jitter)), and `outliers`
    (share, factor) of the intervals that much slower."""

    median: float
    sigma: float = 0.25
    pareto: float | None = None
    tail: tuple[float, float, float] | None = None
    jitter: float = 0.1
    outliers: tuple[float, float] | None = None

    def counts(self, rng: np.random.Generator, n: int, volume: int, le: tuple[float, ...]) -> np.ndarray:
        """n intervals x (len(le) + 1) bucket counts."""
        if self.pareto is not None:
            log_q = math.log(self.median) - np.log1p(-_U.clip(0, 1 - 1e-16)) / self.pareto
        else:
            log_q = math.log(self.median) + self.sigma * _Z
        if self.tail is not None:
            start, top, factor = self.tail
            log_q = log_q + np.log(1 + (factor - 1) * np.clip((_U - start) / (top - start), 0, 1))
        shift = rng.normal(0.0, self.jitter, n)
        if self.outliers is not None:
            shift = shift + np.where(rng.random(n) < self.outliers[0], math.log(self.outliers[1]), 0.0)
        cdf = np.interp(np.log(np.array(le))[None, :] - shift[:, None], log_q, _U, left=0.0, right=1.0)
        probs = np.clip(np.diff(np.concatenate([np.zeros((n, 1)), cdf, np.ones((n, 1))], axis=1), axis=1), 0, None)
        return rng.multinomial(np.full(n, volume), probs / probs.sum(axis=1, keepdims=True))


def lognormal(median: float, sigma: float) -> Draw:
    return lambda rng, n: rng.lognormal(math.log(median), sigma, n)


def errors(p: float, volume: int = VOLUME) -> Draw:
    return lambda rng, n: rng.binomial(volume, min(1.0, p), n) / volume


def bucketed(median: float, sigma: float, step: float) -> Draw:
    """Latency reported in `step` buckets (1 ms, 5 ms): a handful of distinct values, heavy ties."""
    return lambda rng, n: np.round(rng.lognormal(math.log(median), sigma, n) / step) * step


def outliers(median: float, sigma: float, share: float = 0.02, factor: float = 5.0) -> Draw:
    """Log-normal with `share` of the intervals `factor` times slower: a heavy tail in both arms."""
    return lambda rng, n: rng.lognormal(math.log(median), sigma, n) * np.where(rng.random(n) < share, factor, 1.0)


def pareto(scale: float, shape: float = 2.5) -> Draw:
    return lambda rng, n: scale * (1 + rng.pareto(shape, n))


def tail_raised(median: float, sigma: float, start: float, top: float, factor: float = 1.5) -> Draw:
    """Quantiles above `start` raised, linearly up to `factor` at `top` and beyond; the median unchanged."""
    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        u = rng.random(n)
        x = np.exp(math.log(median) + sigma * ndtri(u))
        return np.asarray(x * (1 + (factor - 1) * np.clip((u - start) / (top - start), 0, 1)))
    return draw


@dataclass(frozen=True)
class Shape:
    """The metrics of one service: spec, how the baseline draws, and how a release may change each."""

    name: str
    specs: list[MetricSpec]
    healthy: dict[str, Draw]
    requests: dict[str, Requests] = field(default_factory=dict)  # per latency metric: its requests, for buckets


DEMO = Shape("demo (2 metrics)", [
    MetricSpec(name="latency_p99", kind="latency", direction="increase"),
    MetricSpec(name="error_rate", kind="error_rate", direction="increase", critical=True),
], {"latency_p99": lognormal(120, 0.25), "error_rate": errors(ERROR_P)}, {"latency_p99": Requests(120)})

TEN = Shape(
    "ten metrics (7 latency, 3 error rates)",
    [MetricSpec(name=f"latency_{i}", kind="latency", direction="increase") for i in range(7)]
    + [MetricSpec(name=f"errors_{i}", kind="error_rate", direction="increase") for i in range(3)],
    {**{f"latency_{i}": lognormal(100 + 40 * i, 0.25) for i in range(7)}, **{f"errors_{i}": errors(ERROR_P) for i in range(3)}},
    {f"latency_{i}": Requests(100 + 40 * i) for i in range(7)},
)


def many(k: int, sigma: float = 0.25) -> Shape:
    """k metrics, 70% latency (log-normal), 30% error rates."""
    lat = [f"latency_{i}" for i in range(k - k * 3 // 10)]
    err = [f"errors_{i}" for i in range(k * 3 // 10)]
    return Shape(f"{k} metrics ({len(lat)} latency, {len(err)} error rates)",
                 [MetricSpec(name=n, kind="latency") for n in lat] + [MetricSpec(name=n, kind="error_rate") for n in err],
                 {**{n: lognormal(100 + 40 * (i % 7), sigma) for i, n in enumerate(lat)}, **{n: errors(ERROR_P) for n in err}},
                 {n: Requests(100 + 40 * (i % 7), sigma) for i, n in enumerate(lat)})


TWENTY, FIFTY, TEN_WIDE = many(20), many(50), many(10, sigma=0.4)
# ties and zeros: latencies in 1 ms / 5 ms buckets (4-15 distinct values), counters that are 0 in 67-97% of intervals
TIES = Shape("ties and zeros (5 bucketed latencies, 4 zero-heavy counters)", [
    *(MetricSpec(name=f"fast_{i}", kind="latency") for i in range(3)),
    *(MetricSpec(name=f"slow_{i}", kind="latency") for i in range(2)),
    MetricSpec(name="errors_rare", kind="error_rate"), MetricSpec(name="errors_some", kind="error_rate"),
    MetricSpec(name="retries_rare"), MetricSpec(name="retries_some"),  # kind 'other': the spread test applies
], {"fast_0": bucketed(6, 0.25, 1), "fast_1": bucketed(9, 0.25, 1), "fast_2": bucketed(14, 0.25, 1),
    "slow_0": bucketed(30, 0.2, 5), "slow_1": bucketed(60, 0.2, 5),
    "errors_rare": errors(0.03 / VOLUME), "errors_some": errors(0.4 / VOLUME),
    "retries_rare": errors(0.03 / VOLUME), "retries_some": errors(0.4 / VOLUME)},
    {"fast_0": Requests(6), "fast_1": Requests(9), "fast_2": Requests(14), "slow_0": Requests(30, 0.2),
     "slow_1": Requests(60, 0.2)})
HEAVY = Shape("heavy tails, 20 metrics (Pareto, 2% outliers)",
              [MetricSpec(name=f"latency_{i}", kind="latency") for i in range(14)]
              + [MetricSpec(name=f"errors_{i}", kind="error_rate") for i in range(6)],
              {**{f"latency_{i}": (pareto(80) if i % 2 else outliers(100, 0.25)) for i in range(14)},
               **{f"errors_{i}": errors(ERROR_P) for i in range(6)}},
              {f"latency_{i}": (Requests(80, pareto=2.5) if i % 2 else Requests(100, outliers=(0.02, 5.0)))
               for i in range(14)})


@dataclass(frozen=True)
class Scenario:
    """A release: `changed` maps a metric to how the new version draws it (none: a good release)."""

    name: str
    shape: Shape
    changed: dict[str, Draw] = field(default_factory=dict)
    requests: dict[str, Requests] = field(default_factory=dict)  # how the new version's requests change (buckets)
    canary_volume: float = 1.0  # the canary's share of the baseline's requests per interval (buckets)
    volume: int = REQUESTS  # the baseline's requests per interval (buckets)
    le: tuple[float, ...] = LE


SCENARIOS = {
    "aa_demo": Scenario("A/A, demo shape", DEMO),
    "aa_ten": Scenario("A/A, ten metrics", TEN),
    "latency": Scenario("+20% latency in one of ten metrics", TEN, {"latency_0": lognormal(100 * 1.2, 0.25)},
                        {"latency_0": Requests(120)}),
    "errors": Scenario("2x error rate in one of ten metrics", TEN, {"errors_0": errors(2 * ERROR_P)}),
    "spread": Scenario("latency spread 2x at the same median (demo shape)", DEMO, {"latency_p99": lognormal(120, 0.50)},
                       {"latency_p99": Requests(120, 0.5)}),
    # issue 32's shapes
    "aa_ties": Scenario("A/A, ties and zeros", TIES),
    "aa_uneven": Scenario("A/A, ten metrics, canary error rates over 1/5 of the requests", TEN,
                          {f"errors_{i}": errors(ERROR_P, VOLUME // 5) for i in range(3)}, canary_volume=0.2),
    "aa_low": Scenario("A/A, ten metrics, buckets of 20 requests per interval", TEN, volume=20),
    "aa_wide": Scenario("A/A, ten metrics, latency sigma 0.4", TEN_WIDE),
    "aa_20": Scenario("A/A, 20 metrics", TWENTY),
    "aa_50": Scenario("A/A, 50 metrics", FIFTY),
    "aa_heavy": Scenario("A/A, heavy tails", HEAVY),
    "plus2": Scenario("+2% on every latency of ten metrics (within tolerance)", TEN,
                      {f"latency_{i}": lognormal((100 + 40 * i) * 1.02, 0.25) for i in range(7)},
                      {f"latency_{i}": Requests((100 + 40 * i) * 1.02) for i in range(7)}),
    "latency_2": Scenario("+20% latency in one of two metrics", DEMO, {"latency_p99": lognormal(120 * 1.2, 0.25)},
                          {"latency_p99": Requests(144)}),
    "latency_20": Scenario("+20% latency in one of 20 metrics", TWENTY, {"latency_0": lognormal(100 * 1.2, 0.25)},
                           {"latency_0": Requests(120)}),
    "latency_50": Scenario("+20% latency in one of 50 metrics", FIFTY, {"latency_0": lognormal(100 * 1.2, 0.25)},
                           {"latency_0": Requests(120)}),
    "latency_wide": Scenario("+20% latency in one of ten metrics, sigma 0.4", TEN_WIDE,
                             {"latency_0": lognormal(100 * 1.2, 0.4)}, {"latency_0": Requests(120, 0.4)}),
    "ties_errors": Scenario("ties and zeros: rare counter 10x (0.03 -> 0.3 per interval)", TIES,
                            {"retries_rare": errors(0.3 / VOLUME)}),
    "tail_p80": Scenario("tail only: quantiles above p80 raised, 1.5x from p95 (ten metrics)", TEN,
                         {"latency_0": tail_raised(100, 0.25, 0.80, 0.95)}, {"latency_0": Requests(100, tail=(0.80, 0.95, 1.5))}),
    "tail_p95": Scenario("tail only: quantiles above p95 raised, 1.5x from p99 (ten metrics)", TEN,
                         {"latency_0": tail_raised(100, 0.25, 0.95, 0.99)}, {"latency_0": Requests(100, tail=(0.95, 0.99, 1.5))}),
    "tail_p95_prom": Scenario("tail only, above p95 raised, in Prometheus' default buckets (ten metrics)", TEN,
                              {"latency_0": tail_raised(100, 0.25, 0.95, 0.99)},
                              {"latency_0": Requests(100, tail=(0.95, 0.99, 1.5))}, le=PROM_LE),
    "tail_p95_60": Scenario("tail only, above p95 raised, 60 requests a minute (ten metrics)", TEN,
                            {"latency_0": tail_raised(100, 0.25, 0.95, 0.99)},
                            {"latency_0": Requests(100, tail=(0.95, 0.99, 1.5))}, volume=60),
    "tail_p95_20": Scenario("tail only, above p95 raised, 20 requests a minute (ten metrics)", TEN,
                            {"latency_0": tail_raised(100, 0.25, 0.95, 0.99)},
                            {"latency_0": Requests(100, tail=(0.95, 0.99, 1.5))}, volume=20),
    "aa_ten_prom": Scenario("A/A, ten metrics, Prometheus' default buckets", TEN, le=PROM_LE),
}
# goals per regression scenario: (label, last stage, share caught) — stage 0 is the first, 1 the first prod stage
GOALS: dict[str, list[tuple[str, int, float]]] = {
    **{k: [("caught at the first stage", 0, 0.70), ("caught by the first prod stage", 1, 0.95)]
       for k in ("latency", "latency_2", "latency_20", "latency_50")},
    "errors": [("caught at the first stage", 0, 0.99)],
    "tail_p80": [("caught by the first prod stage", 1, 0.50)],
    "tail_p95": [("caught by the first prod stage", 1, 0.50)],
    "tail_p95_prom": [("caught by the first prod stage", 1, 0.50)],
    "tail_p95_60": [("caught by the first prod stage", 1, 0.50)],
    "tail_p95_20": [("caught by the first prod stage", 1, 0.50)],
    "ties_errors": [("caught by the first prod stage", 1, 0.95)],
}
AT_MOST = {"plus2": 0.005}  # a regression nobody rolls back for: rolled back at most this often


@dataclass
class Outcome:
    """One rollout: where it was rolled back (stage, 'canary'/'soak') or None, and the samples its analyses took."""

    rolled_back_at: tuple[int, str] | None = None
    analyses: int = 0
    analysis_samples: int = 0
    extended: int = 0
    first_look_failures: int = 0
    decide_seconds: float = 0.0  # CPU time inside the judge's analysis calls (not drawing samples)
    decide_calls: int = 0


BUCKETS = False  # --buckets on: latency metrics also report their requests' buckets (set in each worker)


def _draw(sc: Scenario, rng: np.random.Generator, n: int, *, new_version: bool) -> dict[str, np.ndarray]:
    out = {s.name: (sc.changed.get(s.name) if new_version and s.name in sc.changed else sc.shape.healthy[s.name])(rng, n)
           for s in sc.shape.specs}
    if BUCKETS:
        volume = max(1, round(sc.volume * (sc.canary_volume if new_version else 1.0)))
        for name, law in sc.shape.requests.items():
            law = sc.requests.get(name, law) if new_version else law
            out[name + "#buckets"] = law.counts(rng, n, volume, sc.le)
    return out


def _hist(le: tuple[float, ...], rows: np.ndarray) -> Histogram:
    return Histogram.model_construct(le=list(le), counts=rows.astype(float).tolist(), quantile=0.99)


def _samples(base: dict[str, np.ndarray], new: dict[str, np.ndarray], n: int | None = None,
             le: tuple[float, ...] = LE) -> list[MetricSamples]:
    out = []
    for k in base:
        if k.endswith("#buckets"):
            continue
        extra = ({"baseline_buckets": _hist(le, base[k + "#buckets"][:n]), "canary_buckets": _hist(le, new[k + "#buckets"][:n])}
                 if k + "#buckets" in base else {})
        out.append(MetricSamples(name=k, baseline=base[k][:n].tolist(), canary=new[k][:n].tolist(), **extra))
    return out


def _canary(sc: Scenario, rng: np.random.Generator, config: JudgeConfig, place: "StagePlace | None", sequential: bool,
            out: Outcome) -> bool:
    """One canary analysis (with its extensions): True when the canary passes."""
    base, new = _draw(sc, rng, SAMPLES, new_version=False), _draw(sc, rng, SAMPLES, new_version=True)
    out.analyses += 1
    if not sequential:
        out.analysis_samples += SAMPLES
        return judge(config, sc.shape.specs, _samples(base, new, le=sc.le)).verdict == "pass"
    look = 1
    while True:
        data = _samples(base, new, le=sc.le)
        t0 = time.process_time()
        d = decide(config, sc.shape.specs, data, place=place, look=look)
        out.decide_seconds += time.process_time() - t0
        out.decide_calls += 1
        if d.action != "extend":
            out.analysis_samples += len(next(iter(base.values())))
            return d.action == "pass"
        out.extended += 1
        more_b, more_c = _draw(sc, rng, d.more_samples, new_version=False), _draw(sc, rng, d.more_samples, new_version=True)
        base = {k: np.concatenate([base[k], more_b[k]]) for k in base}
        new = {k: np.concatenate([new[k], more_c[k]]) for k in new}
        look += 1


def _soak(sc: Scenario, rng: np.random.Generator, config: JudgeConfig, place: "StagePlace | None") -> bool:
    """A 1-hour soak of the promoted version against the baseline, 12 looks: True when no look alarms."""
    base, new = _draw(sc, rng, SOAK_SAMPLES, new_version=False), _draw(sc, rng, SOAK_SAMPLES, new_version=True)
    looks = SOAK_SAMPLES // LOOK_EVERY
    for look in range(1, looks + 1):
        where = {"place": place} if place is not None else {}  # a checkout from before issue 21 has no `place`
        m = soak_look(config, sc.shape.specs, _samples(base, new, look * LOOK_EVERY, sc.le), look=look, max_looks=looks, **where)
        if m.alarm:
            return False
    return True


def rollout(args: tuple[str, int, int, bool, bool]) -> Outcome:
    """One simulated rollout of scenario `key`, seeded by (seed, index)."""
    global BUCKETS
    key, seed, index, sequential, BUCKETS = args
    sc = SCENARIOS[key]
    rng = np.random.default_rng([seed, index, sequential])
    config = JudgeConfig()
    out = Outcome()
    for stage in range(STAGES):
        place = StagePlace(index=stage, stages=STAGES) if sequential else None
        if not _canary(sc, rng, config, place, sequential, out):
            out.rolled_back_at = (stage, "canary")
            return out
        if not _soak(sc, rng, config, place if sequential else None):
            out.rolled_back_at = (stage, "soak")
            return out
    return out


def clopper(k: int, n: int) -> str:
    lo = 0.0 if k == 0 else float(beta.ppf(0.025, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(0.975, k + 1, n - k))
    return f"{k}/{n} = {k / n:.2%} [95% CI {lo:.2%}, {hi:.2%}]"


def run(key: str, seed: int, n: int, sequential: bool, pool: ProcessPoolExecutor | None,
        buckets: bool = False) -> list[Outcome]:
    jobs = [(key, seed, i, sequential, buckets) for i in range(n)]
    return list(pool.map(rollout, jobs, chunksize=8)) if pool else [rollout(j) for j in jobs]


def _caught_by(outs: list[Outcome], last_stage: int, where: tuple[str, ...] = ("canary", "soak")) -> int:
    return sum(1 for o in outs if o.rolled_back_at and o.rolled_back_at[0] <= last_stage and o.rolled_back_at[1] in where)


def goal(label: str, value: float, target: float, *, at_most: bool, times: bool = False) -> str:
    """One goal line: the value, the goal, value / goal as a ratio, met or not."""
    met = value <= target if at_most else value >= target
    ratio = value / target if target else math.inf
    sign = "<=" if at_most else ">="
    shown = f"{value:.2f}x (goal {sign} {target:.2f}x" if times else f"{value:.2%} (goal {sign} {target:.1%}"
    return f"  goal {label}: {shown}; ratio {ratio:.2f}) {'met' if met else 'NOT MET'}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--rollouts", type=int, default=2000, help="per A/A scenario (regression scenarios use half)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--judge", choices=["today", "sequential", "both"], default="both")
    ap.add_argument("--buckets", choices=["off", "on"], default="off",
                    help="latency metrics also report their requests' buckets (the judge's tail test on every request)")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated: " + ", ".join(SCENARIOS))
    a = ap.parse_args()
    judges = {"both": [False, True], "today": [False], "sequential": [True]}[a.judge]
    if decide is None:
        judges = [False]
    first_prod = min(PROD)
    with ProcessPoolExecutor(a.workers) if a.workers > 1 else _NoPool() as pool:
        for sequential in judges:
            name = "sequential (canary.sequential.decide)" if sequential else "today (one analysis at alpha, soak at alpha)"
            buckets = a.buckets == "on"
            print(f"== judge: {name}; seed {a.seed}; latency buckets "
                  f"{f'on ({REQUESTS} requests a minute, 1.2x apart)' if buckets else 'off'}")
            cost: list[Outcome] = []
            for key in a.scenarios.split(","):
                sc = SCENARIOS[key]
                n = a.rollouts if key.startswith("aa") or key in AT_MOST else max(1, a.rollouts // 2)
                t0 = time.perf_counter()
                outs = run(key, a.seed, n, sequential, pool if isinstance(pool, ProcessPoolExecutor) else None, buckets)
                secs = time.perf_counter() - t0
                rb = [o for o in outs if o.rolled_back_at]
                print(f"{sc.name}: {n} rollouts in {secs:.0f} s")
                at_canary = sum(1 for o in rb if o.rolled_back_at and o.rolled_back_at[1] == "canary")
                print(f"  rolled back: {clopper(len(rb), n)} ({at_canary} at a canary, {len(rb) - at_canary} in a soak)")
                calls = sum(o.decide_calls for o in outs)
                if calls:
                    print(f"  time per analysis look: {1000 * sum(o.decide_seconds for o in outs) / calls:.1f} ms CPU "
                          f"({calls} looks, {len(sc.shape.specs)} metrics)")
                if key in AT_MOST:
                    print(goal("rolled back", len(rb) / n, AT_MOST[key], at_most=True) + f" — {clopper(len(rb), n)}")
                elif key.startswith("aa"):
                    cost += outs
                    stage0 = sum(1 for o in outs if o.rolled_back_at == (0, "canary"))
                    print(f"  first canary analysis not passing: {clopper(stage0, n)}")
                    print(goal("A/A rollouts rolled back", len(rb) / n, 0.005, at_most=True) + f" — {clopper(len(rb), n)}")
                else:
                    first_canary = _caught_by(outs, 0, ("canary",))
                    print(f"  caught at the first stage's canary analysis: {clopper(first_canary, n)}")
                    print(f"  caught during the first stage (canary or soak): {clopper(_caught_by(outs, 0), n)}")
                    print(f"  caught by the end of the first production stage: {clopper(_caught_by(outs, first_prod), n)}")
                    for label, last, share in GOALS.get(key, []):
                        caught = _caught_by(outs, last)
                        print(goal(label, caught / n, share, at_most=False) + f" — {clopper(caught, n)}")
                    if key not in GOALS:
                        print(f"  (spread: no numeric goal beyond being caught; caught at the first stage "
                              f"{_caught_by(outs, 0) / n:.1%})")
            if cost:
                analyses = sum(o.analyses for o in cost)
                per = sum(o.analysis_samples for o in cost) / max(1, analyses)
                ext = sum(o.extended for o in cost)
                print(f"good releases: {analyses} analyses, {ext} extensions, {per:.1f} samples per side per analysis")
                print(goal("analysis time vs today's 60 samples", per / SAMPLES, 1.3, at_most=True, times=True))


class _NoPool:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


if __name__ == "__main__":
    main()
