"""Region guard on traffic shaped like a real service's: diurnal per-region volume in each region's own time zone,
low volume, a chronic offset, one / two / three regions doubling their errors, one region's p99 latency rising 1.5x
(normal and low volume), and a drained region whose metric source replaces NaN by 0. Latency is judged from
histogram buckets, as a source with latency histograms gives it (--p99-only: from a p99 per interval, with the
100-request floor). Drives the guard's own decision code look by look (canary.guard.look_fleet, Streak,
workflows.guard.rules: looks_needed, evacuation_verdict, probe_outcome, restore_due; the GuardInput defaults with
mode auto) on the model of benchmarks/guard_fleet.py, and prints every goal as met / NOT met with its counts and
a 95% interval.

Options: --seed, --days (healthy runs), --trials (detection runs), --quick (a tenth of each), --only ROWS,
--p99-only.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from guard_fleet import DAY, FleetModel, Window, history  # noqa: E402
from scipy import stats  # noqa: E402

from activities.guard_models import Readiness  # noqa: E402
from canary.config import MetricSpec  # noqa: E402
from canary.guard import RegionLook, RegionSamples, look_fleet  # noqa: E402
from workflows.guard.models import EvacuationRecord, GuardInput, GuardRules, RegionWatch  # noqa: E402
from workflows.guard.rules import (  # noqa: E402
    evacuation_verdict,
    looks_needed,
    others_uncertain,
    probe_outcome,
    restore_due,
)

SPECS = [MetricSpec(name="latency_p99", kind="latency", allowed_increase=1.2),
         MetricSpec(name="error_rate", kind="error_rate", critical=True, allowed_increase=1.5)]
EPOCH = datetime(2026, 1, 5, tzinfo=UTC)
BUCKETS = [True]  # the fleet's source gives latency histograms (--p99-only: off)


def fleet(rng: np.random.Generator, **kw: object) -> FleetModel:
    return FleetModel(rng, buckets=BUCKETS[0], **kw)  # type: ignore[arg-type]


def HEALTHY(i: int) -> tuple[float, float, float]:  # noqa: N802 - a constant's role
    return 1.0, 1.0, 0.0


def upper95(k: int, n: int) -> float:
    """Clopper-Pearson upper 95% bound of a rate seen k times in n."""
    return float(stats.beta.ppf(0.975, k + 1, n - k)) if k < n else 1.0


def interval(k: int, n: int) -> str:
    lo = float(stats.beta.ppf(0.025, k, n - k + 1)) if k > 0 else 0.0
    return f"[{lo * 1e4:.2f}, {upper95(k, n) * 1e4:.2f}] per 10k"


class Guard:
    """The guard's decisions after each look, as workflows/guard/decide.py makes them (auto mode, one evacuation a
    look, hold-down, probe at `probe_percent`, restore), on the benchmark's fleet."""

    def __init__(self, model: FleetModel, inp: GuardInput) -> None:
        self.model, self.inp, self.judge = model, inp, inp.judge
        self.rules = GuardRules(mode="auto", min_gap_minutes=inp.rules.min_gap_minutes)
        self.size = inp.window_seconds // inp.sample_interval_seconds
        self.per_look = inp.look_interval_seconds // inp.sample_interval_seconds
        self.windows = {r: Window(self.size) for r in model.names}
        self.watch = {r: RegionWatch(region=r) for r in model.names}
        self.last_auto: datetime | None = None
        self.look = 0
        self.evacuations: list[tuple[int, str]] = []
        self.sick_decisions = self.unhealthy = self.region_looks = self.standing = 0
        self.out_of_service = 0
        self.incident_looks: list[tuple[int, list[str]]] = []

    def share(self, w: RegionWatch) -> float:
        return (self.inp.probe_percent / 100 if w.probing else 0.0) if not w.serving else 1.0

    def step(self, t: float, factors: Callable[[int], tuple[float, float, float]]) -> list[RegionLook]:
        """One look at time `t` (seconds): new samples, the look, then the decisions."""
        self.look += 1
        now = EPOCH + timedelta(seconds=t)
        samples: dict[str, RegionSamples] = {}
        for i, r in enumerate(self.model.names):
            w = self.watch[r]
            err, lat, since = factors(i)
            self.windows[r].push(self.model.draw(i, t - self.per_look * 3, self.per_look, share=self.share(w),
                                                 error_factor=err, latency_factor=lat, since=since))
            samples[r] = self.windows[r].samples(r, history(self.model, i, t, self.size, self.judge.history_days))
        serving = [samples[r] for r, w in self.watch.items() if w.serving or w.probing]
        others = [samples[r] for r, w in self.watch.items() if not (w.serving or w.probing)]
        looks = look_fleet(self.judge, SPECS, serving, others, self.look)
        incident = next((x.incident for x in looks if x.incident), [])
        suspect = next((x.suspect for x in looks if x.suspect), [])
        unsure = next((x.unsure for x in looks if x.unsure), [])
        if incident:
            self.incident_looks.append((self.look, incident))
        for x in looks:
            w = self.watch[x.region]
            w.streak, w.verdict, w.standing = w.streak.after(x), x.summary, x.standing
            if w.serving:
                self.region_looks += 1
                self.unhealthy += x.unhealthy
                self.standing += bool(x.standing)
            else:
                self.out_of_service += 1
        self._decide(now, suspect, unsure)
        return looks

    def _decide(self, now: datetime, suspect: list[str], unsure: list[str]) -> None:
        serving = {r for r, w in self.watch.items() if w.serving}
        sick = sorted((w for w in self.watch.values() if w.serving and w.streak.unhealthy >= looks_needed(
            w, self.judge, self.rules, now, incident=others_uncertain(w.region, suspect, unsure))),
            key=lambda w: (-w.streak.unhealthy, w.region))
        for w in sick:
            self.sick_decisions += 1
            v = evacuation_verdict(self.rules, w.region, serving=serving, evacuated=set(self.watch) - serving,
                                   readiness=Readiness(region=w.region, ready=True), last_auto=self.last_auto, now=now)
            if v.action == "evacuate":
                self._drain(w, now)
                self.last_auto = now
                self.evacuations.append((self.look, w.region))
                break
        for w in self.watch.values():
            outcome = probe_outcome(w, self.judge, self.inp.probe_looks)
            if outcome == "drain":
                w.probing = False
                self._drain(w, now, again=True)
            elif outcome == "restore":
                w.serving, w.evacuated_by_guard, w.probing = True, False, False
                w.evacuations[-1].restored_at = now
                w.streak = type(w.streak)()
            elif restore_due(w, self.judge):
                w.probing = True
                w.streak = type(w.streak)()

    def _drain(self, w: RegionWatch, now: datetime, again: bool = False) -> None:
        w.serving, w.evacuated_by_guard, w.streak = False, True, type(w.streak)()
        if not again:
            w.evacuations.append(EvacuationRecord(evacuated_at=now, why=w.verdict[:100]))


def row(name: str, ok: bool, text: str) -> None:
    print(f"{'met    ' if ok else 'NOT met'} | {name}: {text}", flush=True)


def healthy(inp: GuardInput, seed: int, days: float, peak: float, label: str, goal_sick: bool = False) -> None:
    rng = np.random.default_rng(seed)
    g = Guard(fleet(rng, peak=peak), inp)
    t0 = time.perf_counter()
    looks = int(days * DAY / inp.look_interval_seconds)
    for k in range(looks):
        g.step(k * inp.look_interval_seconds + 120.0, HEALTHY)
    n = g.region_looks
    ev = g.sick_decisions if goal_sick else len(g.evacuations)
    what = "false sick decisions" if goal_sick else "false evacuations"
    row(f"healthy, own time zones, {label}", ev / n * 1e4 <= 1.0,
        f"{ev} {what} in {n} region-looks {interval(ev, n)} (goal <= 1 per 10k); {len(g.evacuations)} evacuations "
        f"[{time.perf_counter() - t0:.0f} s]")
    row(f"healthy, {label}: single unhealthy looks", g.unhealthy / n * 1e4 <= 1.0,
        f"{g.unhealthy} in {n} region-looks {interval(g.unhealthy, n)} (goal: the look's level, "
        f"{inp.judge.look_level() * 1e4:.2g} per 10k)")


def chronic(inp: GuardInput, seed: int, days: float) -> None:
    rng = np.random.default_rng(seed)
    g = Guard(fleet(rng, chronic={0: 1.5}), inp)
    looks = int(days * DAY / inp.look_interval_seconds)
    for k in range(looks):
        g.step(k * inp.look_interval_seconds + 120.0, HEALTHY)
    ev = sum(1 for _, r in g.evacuations if r == "r0")
    out = g.out_of_service / (looks * 3) * 100
    row(f"r0 chronically at 1.5x errors, {days:g} days", ev <= 1,
        f"evacuated {ev} times, out of service {out:.1f}% of region-time; reported as a standing difference at "
        f"{g.standing} looks of {looks} (goal: evacuated at most once, then standing, not flapped)")


def onset_runs(inp: GuardInput, seed: int, trials: int, sick: list[int], stagger: int = 0, after: int = 20,
               peak: float = 1500.0, error: float = 2.0, latency: float = 1.0) -> list[dict[str, object]]:
    """Runs where the regions in `sick` multiply their error rate by `error` and their latency by `latency` at a
    random time (`stagger` looks apart)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(trials):
        model = fleet(rng, peak=peak)
        g = Guard(model, inp)
        start = float(rng.uniform(0, DAY))
        warm = 3
        onset = start + warm * inp.look_interval_seconds + float(rng.uniform(0, inp.look_interval_seconds))
        vol = float(model.volume(sick[0], np.array([onset]))[0])
        first_sick = known = evac_at = None
        evacuated: set[str] = set()
        for k in range(warm + after):
            t = start + (k + 1) * inp.look_interval_seconds

            def factors(i: int, onset: float = onset) -> tuple[float, float, float]:
                if i not in sick:
                    return 1.0, 1.0, 0.0
                return error, latency, onset + sick.index(i) * stagger * inp.look_interval_seconds
            g.step(t, factors)
            after_onset = k + 1 - warm
            if after_onset <= 0:
                continue
            w = g.watch[f"r{sick[0]}"]
            if first_sick is None and (w.streak.unhealthy >= inp.judge.unhealthy_looks or not w.serving):
                first_sick = after_onset
            if evac_at is None and not w.serving:
                evac_at = after_onset
            if known is None and g.incident_looks and set(f"r{i}" for i in sick) <= set(g.incident_looks[-1][1]):
                known = after_onset
            evacuated |= {r for _, r in g.evacuations}
        out.append({"volume": vol, "looks": first_sick, "known": known, "evacuated": evacuated, "evac_at": evac_at,
                    "both": any(len({r for r, w in g.watch.items() if not w.serving}) >= 2 for _ in [0])})
    return out


def one_region(inp: GuardInput, seed: int, trials: int, label: str = "one region's error rate doubles",
               peaks: tuple[float, ...] = (1500.0,), error: float = 2.0, latency: float = 1.0,
               bins: tuple[tuple[int, int], ...] = ((0, 300), (300, 600), (600, 1000), (1000, 10_000))) -> None:
    """Looks to sick by the region's requests per interval at onset; "enough to tell" is the lowest volume from
    which every bin's median is <= 3."""
    runs = [r for peak in peaks for r in onset_runs(inp, seed, trials // len(peaks), [0], peak=peak, error=error,
                                                    latency=latency)]
    trials = len(runs)
    never = inp.judge.unhealthy_looks * 10 + 1
    enough = None
    for lo, hi in bins:
        got = [r["looks"] or never for r in runs if lo <= r["volume"] < hi]  # type: ignore[operator]
        if got:
            med = statistics.median(got)  # type: ignore[type-var]
            print(f"          onset at {lo}-{hi} requests per interval: median {med:g} looks over {len(got)} runs, "
                  f"{sum(1 for x in got if x <= 20)} within 20")  # type: ignore[operator]
            if med <= 3 and enough is None:
                enough = lo
            elif med > 3:
                enough = None
    ok = [r["looks"] or never for r in runs if enough is not None and r["volume"] >= enough]  # type: ignore[operator]
    med = statistics.median(ok) if ok else float("nan")  # type: ignore[type-var]
    evac = [r["evac_at"] or never for r in runs if enough is not None and r["volume"] >= enough]  # type: ignore[operator]
    row(f"{label} at a random time of day", enough is not None,
        f"sick (K unhealthy looks) after a median of {med:g} looks over the {len(ok)} of {trials} runs with >= "
        f"{enough} requests per interval at onset, evacuated after a median of "
        f"{statistics.median(evac) if evac else float('nan'):g} (goal: median <= 3 whenever it serves enough "
        f"to tell)")  # type: ignore[type-var]


def two_regions(inp: GuardInput, seed: int, trials: int) -> None:
    runs = onset_runs(inp, seed, trials, [0, 1])
    never = 21
    known = [r["known"] or never for r in runs]
    both = sum(1 for r in runs if {"r0", "r1"} <= r["evacuated"])  # type: ignore[operator]
    med = statistics.median(known)  # type: ignore[type-var]
    row("two of three regions' error rates double at once", med <= 5 and both == 0,
        f"incident reported after a median of {med:g} looks ({sum(1 for k in known if k <= 20)}/{trials} within 20); "
        f"both evacuated in {both} runs (goal: median <= 5, never both)")  # type: ignore[operator]


def three_regions(inp: GuardInput, seed: int, trials: int, stagger: int) -> None:
    runs = onset_runs(inp, seed, trials, [0, 1, 2], stagger=stagger)
    ev = sum(1 for r in runs if r["evacuated"])
    goal = 0 if stagger == 0 else 1
    row(f"all three double {'at once' if stagger == 0 else f'{stagger} look apart'}", ev <= goal,
        f"evacuations in {ev}/{trials} runs (goal <= {goal})")


def drained(inp: GuardInput, seed: int, looks: int) -> None:
    rng = np.random.default_rng(seed)
    model = fleet(rng, nan_replace=True)
    g = Guard(model, inp)
    g.watch["r0"].serving = False
    g.watch["r0"].evacuated_by_guard = True
    nodata = healthy_ = 0
    for k in range(looks):
        x = next(v for v in g.step(k * 60.0 + 120, HEALTHY) if v.region == "r0")
        g.watch["r0"].probing = False
        g.watch["r0"].serving = False
        nodata += x.no_data
        healthy_ += not x.no_data and not x.unhealthy
    row("a drained region, metrics with nan_strategy: replace (NaN -> 0)", nodata == looks,
        f"no data at {nodata}/{looks} looks, healthy at {healthy_} (goal: no data at every look)")
    empty = look_fleet(inp.judge, SPECS, [RegionSamples(region="a", metrics={"error_rate": [0.01] * 40},
                                                        requests=[100.0] * 40)],
                       [RegionSamples(region="b", metrics={}, requests=[])], 1)[-1]
    row("a region with no traffic (no samples)", empty.no_data and not empty.unhealthy, f"no data: {empty.no_data}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=33)
    parser.add_argument("--days", type=float, default=3.0)
    parser.add_argument("--trials", type=int, default=150)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default="", help="comma-separated rows to run: healthy, low, chronic, one, two, "
                                                   "three, staggered, latency, drained (default: all)")
    parser.add_argument("--p99-only", action="store_true", help="no latency buckets: a p99 per interval")
    args = parser.parse_args()
    BUCKETS[0] = not args.p99_only
    only = set(filter(None, args.only.split(",")))

    def want(name: str) -> bool:
        return not only or name in only
    q = 10 if args.quick else 1
    inp = GuardInput.model_validate({"service": "bench", "requested_by": "bench"})
    j = inp.judge
    how = f"from p99s of >= {j.min_requests:g} requests" if args.p99_only else "from buckets 1.19x apart"
    print(f"guard defaults: K={j.unhealthy_looks}, level {j.look_level():.2g} a look, window "
          f"{inp.window_seconds} s of {inp.sample_interval_seconds} s, history {j.history_days} days, latency {how}; "
          f"3 regions at UTC-5, UTC+1, UTC+5:30; seed {args.seed}; "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    t0 = time.perf_counter()
    if want("healthy"):
        healthy(inp, args.seed, args.days / q, 1500.0, "normal volume (150-1500 requests per interval)")
    if want("low"):
        healthy(inp, args.seed + 1, args.days / q, 150.0, "low volume (15-150 requests per interval)", goal_sick=True)
    if want("chronic"):
        chronic(inp, args.seed + 2, args.days / q)
    if want("one"):
        one_region(inp, args.seed + 3, 2 * args.trials // q)
    if want("two"):
        two_regions(inp, args.seed + 4, 2 * args.trials // q)
    if want("three"):
        three_regions(inp, args.seed + 5, args.trials // q, 0)
    if want("staggered"):
        three_regions(inp, args.seed + 6, args.trials // q, 1)
    if want("latency"):
        one_region(inp, args.seed + 8, 2 * args.trials // q, "one region's p99 latency rises 1.5x (normal and low "
                   "volume)", peaks=(1500.0, 150.0), error=1.0, latency=1.5,
                   bins=((0, 50), (50, 100), (100, 150), (150, 300), (300, 600), (600, 10_000)))
    if want("drained"):
        drained(inp, args.seed + 7, 600 // q)
    print(f"[{time.perf_counter() - t0:.0f} s, load {os.getloadavg()[0]:.1f}]")


if __name__ == "__main__":
    main()
