"""Region guard: false automatic evacuations among healthy, equal regions, and how fast a sick region is caught.

Runs the guard's own judgement (canary.guard.look_fleet and its K-looks streaks, with the defaults of
`bifrost guard start`: a look every 60 s over 120 s of 3 s samples, i.e. 20 new samples a look in a window of 40;
K = 2; alpha 0.01 per 100 looks) on samples drawn with the simulated fleet's noise model (log-normal latency,
binomial errors over its requests per interval; activities/adapters/simulated.py), fresh at every look.
Prints, from one run, each figure as a ratio to its goal (issue #19):
- false automatic evacuations per 10,000 region-looks when every region is healthy and equal (goal <= 1);
- the median number of looks from onset until a region whose error rate doubles is judged sick for K looks
  (goal <= 3).
Options: --seed, --regions, --region-looks (size of the healthy run), --trials (detection runs).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from activities.adapters.simulated import FleetScenario  # noqa: E402
from canary.config import MetricSpec  # noqa: E402
from canary.guard import GuardJudge, RegionSamples, Streak, look_fleet  # noqa: E402
from workflows.guard.models import GuardInput  # noqa: E402

SPECS = [MetricSpec(name="latency_p99", kind="latency", allowed_increase=1.2),
         MetricSpec(name="error_rate", kind="error_rate", critical=True, allowed_increase=1.5)]
FALSE_GOAL = 1.0  # per 10,000 region-looks
DETECT_GOAL = 3.0  # looks, median


class Fleet:
    """Per region, a sliding window of samples drawn as the simulated fleet draws them."""

    def __init__(self, rng: np.random.Generator, regions: int, window: int, per_look: int) -> None:
        s = FleetScenario()
        self.rng, self.window, self.per_look, self.s = rng, window, per_look, s
        self.mu = math.log(s.base_latency_ms) - s.latency_sigma**2 / 2
        self.names = [f"r{i}" for i in range(regions)]
        self.data = {r: self._draw(window, 1.0) for r in self.names}

    def _draw(self, n: int, error_factor: float) -> dict[str, np.ndarray]:
        s = self.s
        return {"latency_p99": self.rng.lognormal(self.mu, s.latency_sigma, n),
                "error_rate": self.rng.binomial(s.requests_per_interval, s.base_error_rate * error_factor, n)
                / s.requests_per_interval}

    def advance(self, error_factor: dict[str, float]) -> list[RegionSamples]:
        for r in self.names:
            new = self._draw(self.per_look, error_factor.get(r, 1.0))
            self.data[r] = {m: np.concatenate([v, new[m]])[-self.window:] for m, v in self.data[r].items()}
        return [RegionSamples(region=r, metrics={m: v.tolist() for m, v in self.data[r].items()}) for r in self.names]


def healthy_run(judge: GuardJudge, rng: np.random.Generator, regions: int, region_looks: int, window: int,
                per_look: int) -> tuple[int, int, int]:
    """(region-looks, unhealthy looks, automatic evacuations) with every region healthy and equal."""
    fleet = Fleet(rng, regions, window, per_look)
    streaks = {r: Streak() for r in fleet.names}
    looks = max(1, region_looks // regions)
    unhealthy = evacuations = 0
    for look in range(1, looks + 1):
        for verdict in look_fleet(judge, SPECS, fleet.advance({}), [], look):
            unhealthy += verdict.unhealthy
            streaks[verdict.region] = streaks[verdict.region].after(verdict)
            if streaks[verdict.region].sick(judge):
                evacuations += 1
                streaks[verdict.region] = Streak()  # evacuated, and (as it is healthy) soon restored
    return looks * regions, unhealthy, evacuations


def detection_run(judge: GuardJudge, rng: np.random.Generator, regions: int, window: int, per_look: int,
                  max_looks: int = 30) -> int:
    """Looks from onset (the first look with doubled errors in r0) until r0 is sick for K looks."""
    fleet = Fleet(rng, regions, window, per_look)
    streak = Streak()
    for look in range(1, max_looks + 1):
        verdict = look_fleet(judge, SPECS, fleet.advance({"r0": 2.0}), [], look)[0]
        streak = streak.after(verdict)
        if streak.sick(judge):
            return look
    return max_looks + 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument("--regions", type=int, default=3)
    parser.add_argument("--region-looks", type=int, default=12_000, help="size of the healthy run")
    parser.add_argument("--trials", type=int, default=200, help="detection runs")
    args = parser.parse_args()
    defaults = GuardInput.model_validate({"service": "bench", "requested_by": "bench"})
    judge = defaults.judge
    per_look = defaults.look_interval_seconds // defaults.sample_interval_seconds
    window = defaults.window_seconds // defaults.sample_interval_seconds
    rng = np.random.default_rng(args.seed)
    print(f"guard defaults: K={judge.unhealthy_looks}, alpha {judge.alpha} per {judge.horizon_looks} looks "
          f"(level {judge.look_level():.2g} a look), window {window} samples, {per_look} new a look; "
          f"{args.regions} regions; seed {args.seed}")
    t0 = time.perf_counter()
    n, unhealthy, evacuations = healthy_run(judge, rng, args.regions, args.region_looks, window, per_look)
    per_10k = evacuations / n * 10_000
    bound = 3.0 / n * 10_000  # 95% upper bound when none is seen (rule of three)
    print(f"healthy: {n} region-looks, {unhealthy} unhealthy looks, {evacuations} automatic evacuations "
          f"= {per_10k:.2f} per 10,000 (95% upper bound {max(per_10k, bound):.2f}); goal <= {FALSE_GOAL:g}: "
          f"ratio {per_10k / FALSE_GOAL:.2f} (upper bound {max(per_10k, bound) / FALSE_GOAL:.2f}) "
          f"[{time.perf_counter() - t0:.0f} s]")
    t0 = time.perf_counter()
    delays = [detection_run(judge, rng, args.regions, window, per_look) for _ in range(args.trials)]
    median = statistics.median(delays)
    q = statistics.quantiles(delays, n=10)
    print(f"error rate x2 in one region: evacuated after a median of {median:g} looks (p10 {q[0]:g}, p90 {q[-1]:g}, "
          f"max {max(delays)}) over {args.trials} runs; goal <= {DETECT_GOAL:g}: ratio {median / DETECT_GOAL:.2f} "
          f"[{time.perf_counter() - t0:.0f} s]")


if __name__ == "__main__":
    main()
