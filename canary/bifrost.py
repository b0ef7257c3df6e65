"""Bifrost mode: Mann-Whitney and Welch tests per metric (Simes-combined), Holm across metrics, an effect gate.

No dead zone: the Hodges-Lehmann estimate and its interval are reported, not used to decide (docs/judge.md).
"""

# Mann-Whitney U (ties corrected) sees consistent shifts; Welch's t on the means sees what ranks
# under-weight (a slow mode in a bimodal mix, sparse error counts). Holm's procedure keeps the chance
# of any false alarm per analysis at `alpha`; a significant metric is High/Low only if its effect
# (mean ratio or CLES) also exceeds the allowed change.

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import stdtr

from canary.bucket_tail import BucketTail, bucket_tail_test
from canary.config import DEFAULT_TOLERANCE, JudgeConfig, JudgeResult, MetricResult, MetricSamples, MetricSpec
from canary.counts import count_test_p
from canary.findings import precheck, prepare, samples_of, scored
from canary.histogram import Histogram
from canary.ranks import UStat, shift_estimate_and_interval, u_statistic
from canary.scoring import verdict_for, weighted_sum
from canary.shape import floored_ratio, resolution, spread_test, tail_test, top_ratio
from common.types import NO_VERDICT, REGRESSED, Direction, MetricKind

DEFAULT_ALPHA = 0.01
DEFAULT_RATIO_MARGIN = 1.05  # without allowed_increase/decrease, changes of the mean under 5% are not regressions
DEFAULT_CLES_MARGIN = 0.55  # ... and, for the CLES measure, P(canary > baseline) within 0.45..0.55
SPREAD_MARGIN = 1.5  # a canary spreading 1.5x as much around its median regresses even at the same mean
INTERVAL_LEVEL = 0.95
COUNT_TEST_BELOW = 0.2  # the exact count test runs when the rank or mean test's up-side p-value is below this


@dataclass(frozen=True)
class Evidence:
    """The statistics of one baseline/canary comparison, before any decision."""

    baseline: np.ndarray  # sorted, cleaned
    canary: np.ndarray
    u: UStat
    p_rank_up: float
    p_rank_down: float
    p_mean_up: float
    p_mean_down: float
    mean_b: float
    mean_c: float
    p_spread_up: float = 1.0  # ranks of the absolute deviations from each side's median: the canary spreads more
    spread_ratio: float = 1.0  # mean absolute deviation from the median, canary / baseline (floored, never inf)
    means_only: bool = False  # judge on Welch's test of the means alone (sides whose per-sample noise differs)
    p_tail_up: float = 1.0  # upper-decile rank test (latency): the canary's tail is heavier
    tail_ratio: float = 1.0  # mean of the canary's upper decile over the baseline's
    tolerance: float = 0.0  # the up-side tests compared the canary with the baseline x (1 + tolerance)
    quantum: float = 0.0  # the data's resolution (smallest gap between distinct values): one count for a rate
    shape_tests: tuple[str, ...] = ("spread",)  # the shape tests taking part: 'spread', 'tail'
    p_plain: tuple[float, float] = (1.0, 1.0)  # Welch (up, down) on the unscaled baseline, when tolerance > 0
    p_count_up: float | None = None  # exact permutation test of the canary's total, on zero-heavy counts only
    buckets: BucketTail | None = None  # the tail test on the requests' buckets (latency with buckets: 'buckets')

    @property
    def p_up(self) -> float:
        """p-value for 'canary is higher, more spread or heavier-tailed': Simes over the tests taking part."""
        if self.means_only:
            return self.p_mean_up
        return simes(self.p_rank_up, self.p_mean_up, *self._p_shape())

    def _p_shape(self) -> list[float]:
        """The shape tests' share: one p-value, Bonferroni over spread and tail (so the location tests keep
        Simes' factor 3 whichever shape tests a kind takes)."""
        ps = [p for name, p in (("spread", self.p_spread_up), ("tail", self.p_tail_up), ("buckets", self.p_buckets_up))
              if name in self.shape_tests]
        return [min(1.0, len(ps) * min(ps))] if ps else []

    @property
    def p_buckets_up(self) -> float:
        """The bucket tail test's p-value (1 without buckets)."""
        return self.buckets.p if self.buckets is not None else 1.0

    def p_hint(self, direction: Direction) -> float:
        """`p_value` before the tolerance (the location tests on the unscaled baseline): what makes an analysis
        extend rather than pass — a non-binding rule, so it spends nothing of the budget."""
        if not self.tolerance:
            return self.p_value(direction)
        up = self.p_plain[0] if self.means_only else simes(self.u.p_greater(), self.p_plain[0], *self._p_shape())
        down = self.p_plain[1] if self.means_only else simes(self.u.p_less(), self.p_plain[1])
        return {"increase": up, "decrease": down}.get(direction, min(1.0, 2 * min(up, down)))

    @property
    def p_down(self) -> float:
        """p-value for 'canary is lower'."""
        if self.means_only:
            return self.p_mean_down
        return simes(self.p_rank_down, self.p_mean_down)

    def p_value(self, direction: Direction) -> float:
        """p-value for a harmful change in `direction` ('either' tests both sides)."""
        if direction == "increase":
            return self.p_up
        if direction == "decrease":
            return self.p_down
        return min(1.0, 2 * min(self.p_up, self.p_down))

    def side(self, direction: Direction) -> str:
        """Which harmful side the evidence points to: 'High' or 'Low'."""
        if direction == "either":
            return "High" if self.p_up <= self.p_down else "Low"
        return "High" if direction == "increase" else "Low"

    @property
    def ratio(self) -> float:
        """mean(canary) / mean(baseline), never infinite: a zero mean gets half a quantum per sample added to both.

        NaN when undefined (negative means)."""
        if self.mean_b < 0 or self.mean_c < 0:
            return math.nan
        return floored_ratio(self.mean_c, self.mean_b, self.quantum / 2 / max(1, min(len(self.baseline), len(self.canary))))


def simes(*ps: float) -> float:
    """Simes' combined p-value, min over i of k * p_(i) / i: valid for independent or positively dependent tests.

    The rank and mean tests grow with the same shift of the canary; the spread test is nearly independent of
    both under the null (location and scale statistics), so the combination keeps its level."""
    k = len(ps)
    return min(1.0, *(k * p / i for i, p in enumerate(sorted(ps), start=1)))


def welch_p_values(canary: np.ndarray, baseline: np.ndarray) -> tuple[float, float]:
    """One-sided Welch t-test p-values for (canary mean higher, canary mean lower)."""
    n, m = len(canary), len(baseline)
    mc, mb = float(canary.sum()) / n, float(baseline.sum()) / m
    d = mc - mb
    vc = float(np.dot(canary - mc, canary - mc)) / (n - 1) / n if n > 1 else 0.0
    vb = float(np.dot(baseline - mb, baseline - mb)) / (m - 1) / m if m > 1 else 0.0
    se2 = vc + vb
    if se2 <= 0 or not math.isfinite(se2):
        return (0.0, 1.0) if d > 0 else (1.0, 0.0) if d < 0 else (1.0, 1.0)
    denom = (vc * vc / (n - 1) if n > 1 else 0.0) + (vb * vb / (m - 1) if m > 1 else 0.0)
    df = se2 * se2 / denom if denom > 0 else float(max(n + m - 2, 1))
    t = d / math.sqrt(se2)
    return float(stdtr(df, -t)), float(stdtr(df, t))


def gather(baseline: np.ndarray, canary: np.ndarray, *, means_only: bool = False, tolerance: float = 0.0,
           shape_tests: tuple[str, ...] = ("spread",), direction: Direction = "either",
           buckets: tuple[Histogram, Histogram] | None = None) -> Evidence:
    """Run the rank, mean and shape tests on cleaned samples (each with at least one point).

    `means_only`: decide on the means alone, for samples whose per-sample noise differs between the sides by
    design (a rate over fewer requests spreads wider at the same mean), where ranks and spread would compare
    volumes, not health. `tolerance`: a practical margin — on non-negative data the up-side tests compare the
    canary with the baseline scaled by 1 + tolerance (the down-side ones with it divided; only the harmful sides of
    `direction`), so a shift inside the margin is no evidence however many samples there are. `shape_tests`:
    'spread' and/or 'tail'. `buckets` (baseline, canary): the requests' latency buckets; with them the tail is
    judged on every request (`canary.bucket_tail`) instead of on the intervals' upper decile."""
    b, c = np.sort(baseline), np.sort(canary)
    tail = None
    if buckets is not None and "tail" in shape_tests and not means_only and direction != "decrease":
        tail = bucket_tail_test(buckets[1], buckets[0], tolerance if b[0] >= 0 and c[0] >= 0 else 0.0)
        if tail is not None:
            shape_tests = tuple("buckets" if t == "tail" else t for t in shape_tests)
    u = u_statistic(c, b)
    quantum = resolution(b, c)
    scaled = tolerance > 0 and b[0] >= 0 and c[0] >= 0
    up = scaled and direction != "decrease"  # only the harmful side(s) of `direction` are tested with the margin
    down = scaled and direction != "increase"
    b_up, b_down = b * (1 + tolerance) if up else b, b / (1 + tolerance) if down else b
    u_up, u_down = u_statistic(c, b_up) if up else u, u_statistic(c, b_down) if down else u
    plain = welch_p_values(c, b)
    w_up = welch_p_values(c, b_up)[0] if up else plain[0]
    r_up = u_up.p_greater()
    # zero-heavy counts: the rank and mean tests' normal approximations are anti-conservative in the far tail, so
    # each takes at least the exact count test's p-value (valid for any i.i.d. counts, bursty or not): the larger
    # is valid wherever either is. Computed only when it could matter, so long non-zero samples pay nothing.
    p_count = count_test_p(c, b, quantum) if direction != "decrease" and min(r_up, w_up) < COUNT_TEST_BELOW else None
    if p_count is not None:
        r_up, w_up = max(r_up, p_count), max(w_up, p_count)
    w_down = welch_p_values(c, b_down)[1] if down else plain[1]
    b_time = np.asarray(baseline, dtype=float) * (1 + tolerance) if up else np.asarray(baseline, dtype=float)
    # the spread test gets the samples in time order (it thins long ones by position: still independent draws)
    s_up, s_ratio = spread_test(np.asarray(canary, dtype=float), b_time, quantum) \
        if "spread" in shape_tests and not means_only else (1.0, 1.0)
    t_up = tail_test(c, b_up) if "tail" in shape_tests and not means_only else 1.0
    t_ratio = top_ratio(c, b, quantum) if "tail" in shape_tests else 1.0
    return Evidence(b, c, u, r_up, u_down.p_less(), w_up, w_down, float(b.mean()), float(c.mean()),
                    s_up, s_ratio, means_only, t_up, t_ratio, tolerance if scaled else 0.0, quantum, shape_tests,
                    plain, p_count, tail)


def shape_tests_for(spec: MetricSpec) -> tuple[str, ...]:
    """Which shape tests a metric's kind takes: spread for all but rates (a rate's spread follows its mean and
    its request volume, so it says nothing about health), the upper-tail test for latency."""
    if spec.kind == "error_rate":
        return ()
    return ("spread", "tail") if spec.kind == "latency" else ("spread",)


def tolerance_for(spec: MetricSpec, tolerances: Mapping[MetricKind, float]) -> float:
    """The practical tolerance of a metric: its kind's entry in `JudgeConfig.tolerance` (0 when none)."""
    return float(tolerances.get(spec.kind, 0.0))


def gather_for(spec: MetricSpec, baseline: np.ndarray, canary: np.ndarray, tolerances: Mapping[MetricKind, float],
               *, means_only: bool = False, buckets: tuple[Histogram, Histogram] | None = None) -> Evidence:
    """`gather` with the metric's tolerance and shape tests (and the requests' buckets, for a latency that has them)."""
    return gather(baseline, canary, means_only=means_only, tolerance=tolerance_for(spec, tolerances),
                  shape_tests=shape_tests_for(spec), direction=spec.direction, buckets=buckets)


def buckets_of(samples: MetricSamples, last: int | None = None) -> tuple[Histogram, Histogram] | None:
    """(baseline, canary) buckets of a metric's samples, the newest `last` intervals of each when given."""
    b, c = samples.baseline_buckets, samples.canary_buckets
    if b is None or c is None:
        return None
    if last is not None:
        b, c = (h.model_copy(update={"counts": h.counts[-last:]}) for h in (b, c))
    return b, c


def _margins(spec: MetricSpec) -> tuple[float, float]:
    if spec.effect_size == "cles":
        return spec.allowed_increase or DEFAULT_CLES_MARGIN, spec.allowed_decrease or 1 - DEFAULT_CLES_MARGIN
    return spec.allowed_increase or DEFAULT_RATIO_MARGIN, spec.allowed_decrease or 1 / DEFAULT_RATIO_MARGIN


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def _change(ev: Evidence) -> str:
    r = ev.ratio
    if math.isnan(r):
        return f"mean {_fmt(ev.mean_c)} vs {_fmt(ev.mean_b)}"
    if ev.mean_b == 0:
        return f"mean {_fmt(ev.mean_c)} vs 0 ({r:.2f}x with half a count added per side)"
    rel = f"{r:.2f}x" if r >= 2 or r <= 0.5 else f"{(r - 1) * 100:+.1f}%"
    return f"mean {_fmt(ev.mean_c)} vs {_fmt(ev.mean_b)} ({rel})"


def _effect_and_allowed(spec: MetricSpec, ev: Evidence) -> tuple[float, float]:
    effect = ev.u.cles if spec.effect_size == "cles" else ev.ratio
    up_margin, down_margin = _margins(spec)
    return effect, up_margin if ev.side(spec.direction) == "High" else down_margin


def gate_open(spec: MetricSpec, ev: Evidence) -> bool:
    """Whether the effect in the evidence's harmful direction exceeds the allowed change (and the tolerance)."""
    effect, allowed = _effect_and_allowed(spec, ev)
    if ev.side(spec.direction) == "High":
        if spec.effect_size != "cles":
            allowed = max(allowed, 1 + ev.tolerance)
        return math.isnan(effect) or effect >= allowed or _shape_regressed(ev) is not None
    if spec.effect_size != "cles":
        allowed = min(allowed, 1 / (1 + ev.tolerance))
    return math.isnan(effect) or effect <= allowed


def _shape_regressed(ev: Evidence) -> str | None:
    """'spread', 'tail' or 'buckets' when that test carries the evidence (its p-value is the smallest of the up-side tests)
    and its effect is beyond its margin: spread grown 1.5x, or the upper decile's mean beyond the allowed change."""
    if ev.means_only:
        return None
    location = min(ev.p_rank_up, ev.p_mean_up)
    if "spread" in ev.shape_tests and ev.p_spread_up < location and ev.spread_ratio >= SPREAD_MARGIN:
        return "spread"
    tail_margin = max(DEFAULT_RATIO_MARGIN, 1 + ev.tolerance)
    if ev.buckets is not None and "buckets" in ev.shape_tests and ev.p_buckets_up < min(location, ev.p_spread_up) \
            and ev.buckets.ratio >= tail_margin:
        return "buckets"
    if "tail" in ev.shape_tests and ev.p_tail_up < min(location, ev.p_spread_up) and ev.tail_ratio >= tail_margin:
        return "tail"
    return None


def decide(
    spec: MetricSpec,
    ev: Evidence,
    threshold: float,
    *,
    rejected: bool | None = None,
    p_factor: float = 1.0,
    context: str = "",
) -> MetricResult:
    """High/Low when significant at `threshold` and beyond the allowed change, else Pass, with the reason.

    `rejected` overrides the significance test (Holm); `p_factor` scales the p-value; `context` prefixes the reason."""
    p = min(1.0, ev.p_value(spec.direction) * p_factor)
    side = ev.side(spec.direction)
    significant = p <= threshold if rejected is None else rejected
    effect, allowed = _effect_and_allowed(spec, ev)
    hl, ci = shift_estimate_and_interval(ev.canary, ev.baseline, ev.u, INTERVAL_LEVEL)
    shift = f"median shift {hl:+.4g} (95% CI {_fmt(ci[0])} to {_fmt(ci[1])})"
    if significant and gate_open(spec, ev):
        label = side
        shape = _shape_regressed(ev) if side == "High" else None
        what = {None: "higher", "spread": f"more spread ({ev.spread_ratio:.2f}x)",
                "tail": f"heavier upper tail (top 10% mean {ev.tail_ratio:.2f}x)",
                "buckets": f"heavier upper tail ({ev.buckets.text() if ev.buckets else ''})"}[shape]
        reason = f"canary {'lower' if side == 'Low' else what}: {_change(ev)}, {shift}; p={p:.2g} <= {threshold:.2g}{_tol(ev)}"
    elif significant:
        label = "Pass"
        measure = f"CLES {effect:.2f}" if spec.effect_size == "cles" else f"ratio {effect:.3f}"
        reason = f"significant but small: {measure} within allowed {allowed:.3g}; {_change(ev)}, p={p:.2g}{_tol(ev)}"
    else:
        label = "Pass"
        what = "change" if spec.direction == "either" else spec.direction
        level = f"> {threshold:.2g}" if p > threshold else f"<= {threshold:.2g} but Holm's step-down stopped at a smaller p-value"
        reason = f"no significant {what}: {_change(ev)}, {shift}; p={p:.2g} {level}{_tol(ev)}"
    critical = spec.critical and label != "Pass" and _beyond_critical(spec, effect, label)
    return MetricResult(
        name=spec.name,
        classification=label,
        critical=critical,
        p_value=p,
        interval=ci,
        estimate=hl,
        effect_size=None if not math.isfinite(effect) else effect,
        baseline_n=len(ev.baseline),
        canary_n=len(ev.canary),
        baseline_mean=ev.mean_b,
        canary_mean=ev.mean_c,
        reason=context + reason + (" [critical]" if critical else ""),
        direction=spec.direction,
        muted=spec.muted,
        groups=list(spec.groups),
        effect_measure=spec.effect_size,
        interval_level=INTERVAL_LEVEL,
        threshold=threshold,
        tests={
            "mann_whitney_up": ev.p_rank_up,
            "mann_whitney_down": ev.p_rank_down,
            "welch_up": ev.p_mean_up,
            "welch_down": ev.p_mean_down,
            **({"spread_up": ev.p_spread_up} if "spread" in ev.shape_tests else {}),
            **({"tail_up": ev.p_tail_up} if "tail" in ev.shape_tests else {}),
            **({"count_up": ev.p_count_up} if ev.p_count_up is not None else {}),
            **({"buckets_tail_up": ev.p_buckets_up} if ev.buckets is not None else {}),
        },
        tolerance=ev.tolerance or None,
    )


def _tol(ev: Evidence) -> str:
    return f" (tested beyond the {ev.tolerance:.0%} tolerance)" if ev.tolerance else ""


def _beyond_critical(spec: MetricSpec, effect: float, label: str) -> bool:
    if math.isnan(effect):
        return True
    if label == "High":
        return spec.critical_increase is None or effect >= spec.critical_increase
    return spec.critical_decrease is None or effect <= spec.critical_decrease


def holm(p_values: Sequence[float], alpha: float) -> list[tuple[bool, float]]:
    """Holm's step-down procedure: per hypothesis (rejected, the level its p-value was compared with)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    out: list[tuple[bool, float]] = [(False, alpha)] * m
    stopped = False
    for rank, i in enumerate(order):
        level = alpha / (m - rank)
        stopped = stopped or p_values[i] > level
        out[i] = (not stopped, level)
    return out


def classify_bifrost(spec: MetricSpec, data: MetricSamples, min_samples: int, alpha: float = DEFAULT_ALPHA) -> MetricResult:
    """One metric on its own, as its own family at level `alpha`."""
    base, can = prepare(spec, data)
    return precheck(spec, base, can, min_samples) or decide(
        spec, gather_for(spec, base, can, DEFAULT_TOLERANCE, buckets=buckets_of(data)), alpha)


def judge_bifrost(config: JudgeConfig, specs: list[MetricSpec], data: list[MetricSamples]) -> JudgeResult:
    """Bifrost mode: every metric tested in its harmful direction, Holm across the family, then the score."""
    return judge_with_evidence(config, specs, data)[0]


def judge_with_evidence(
    config: JudgeConfig, specs: list[MetricSpec], data: list[MetricSamples]
) -> tuple[JudgeResult, dict[int, Evidence]]:
    """`judge_bifrost`, plus the evidence of every metric that was tested (by index in `specs`)."""
    prepared = [prepare(s, samples_of(s.name, data)) for s in specs]
    results: list[MetricResult | None] = []
    evidence: dict[int, Evidence] = {}
    for i, (spec, (base, can)) in enumerate(zip(specs, prepared)):
        early = precheck(spec, base, can, config.min_samples)
        results.append(early)
        if early is None:
            evidence[i] = gather_for(spec, base, can, config.tolerance, buckets=buckets_of(samples_of(spec.name, data)))
    family = [i for i in evidence if not specs[i].muted]
    steps = holm([evidence[i].p_value(specs[i].direction) for i in family], config.alpha)
    for i, (rejected, level) in zip(family, steps):
        results[i] = decide(specs[i], evidence[i], level, rejected=rejected)
    for i in evidence:
        if specs[i].muted:  # report-only: judged at the family's first Holm level, never scored
            results[i] = decide(specs[i], evidence[i], config.alpha / max(1, len(family)))
    final = [r for r in results if r is not None]
    return _verdict(config, specs, final), evidence


def undiluted(config: JudgeConfig, regressed: list[MetricResult]) -> list[MetricResult]:
    """The regressed metrics that fail the decision on their own, whatever the score: all of them. Group weights
    (`JudgeConfig.groups`) shape the score, which Kayenta mode decides by and bifrost mode only shows, so neither
    the number of metrics nor a weighting can average a regression away."""
    return list(regressed)


def _verdict(config: JudgeConfig, specs: list[MetricSpec], results: list[MetricResult]) -> JudgeResult:
    active = [(s, r) for s, r in zip(specs, results) if not s.muted]
    sc = weighted_sum(scored(specs, results), config.groups, nodata_rule=False)
    t = config.thresholds
    regressed = [r for _, r in active if r.classification in REGRESSED]
    unknown = [r for _, r in active if r.classification in NO_VERDICT]
    verdict = verdict_for(sc.score, t.pass_, t.marginal)
    if undiluted(config, regressed):  # one regression fails however many metrics are fine (the score is for display)
        verdict = "fail"
    if not active or (verdict == "pass" and unknown):  # evidence of a regression outranks missing data
        verdict = "insufficient_data"
    if verdict == "insufficient_data":
        detail = "; ".join(f"{r.name}: {r.reason}" for r in unknown) or "no metrics to judge"
        summary = f"INSUFFICIENT DATA (score {sc.score:.2f} over the metrics with data) — {detail}"
    else:
        summary = f"{verdict.upper()} score {sc.score:.2f}"
        if sc.reason:
            summary += f" ({sc.reason})"
        if regressed:
            summary += f" — {len(regressed)} of {len(active)} metrics regressed: " + ", ".join(
                f"{r.name} {r.classification}" + (" (critical)" if r.critical else "") for r in regressed
            )
        else:
            summary += f" — {len(active)} metrics judged, none regressed at a {config.alpha * 100:.2g}% family-wise false-alarm rate"
        if unknown:
            summary += "; no data for " + ", ".join(r.name for r in unknown)
    return JudgeResult(score=sc.score, verdict=verdict, metrics=results, summary=summary, mode="bifrost", group_scores=sc.group_scores)
