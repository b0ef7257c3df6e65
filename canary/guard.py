"""The region guard's judgement: each look, every serving region against the same service's other regions.

A region's recent samples are the soak monitor's "canary" side and its peers' samples (interleaved in time) the
"baseline" side, judged by `canary.monitor.look_bifrost` (suffix windows, Bonferroni over windows, Holm over
metrics, the effect-size gate). The guard never stops looking, so its budget is spent per *horizon*: every
`horizon_looks` looks of one region are one soak with budget `alpha`, spent evenly (`alpha / horizon_looks` a
look). By the union bound, in every horizon the chance that a healthy region (exchangeable with its peers) is
judged unhealthy at any look is at most `alpha`, whatever the correlation between looks: over an unbounded
number of looks, at most `alpha / horizon_looks` false alarms per region-look on average. Requiring
`unhealthy_looks` consecutive unhealthy looks before acting only lowers that.

Absolute SLO thresholds (`slo`) count too: a region whose recent mean passes one is unhealthy whatever its peers
do (every region may be sick at once; the rules then keep the last one serving).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from canary import monitor
from canary.config import JudgeConfig, MetricSamples, MetricSpec, MonitorResult
from canary.guard_counts import Comparison, Histogram, Pooled, Side, compare, slo_breach

# Regions serve different shares, so a rate's per-sample noise differs between a region and its peers (a rate over
# fewer requests spreads wider) while its mean does not: error rates are compared on their means alone (Welch),
# not on ranks or spread, which would see a region's share instead of its health (docs/traffic.md).
MEANS_ONLY = frozenset({"error_rate"})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class GuardJudge(_Strict):
    """How the guard judges a region against its peers, and how many looks make a region sick or well."""

    alpha: float = Field(default=0.01, gt=0, lt=0.5,
                         description="false-alarm budget per region over each horizon of looks")
    horizon_looks: int = Field(default=100, ge=1, le=1_000_000,
                               description="looks per horizon: each look spends alpha / horizon_looks (1e-4 by default)")
    min_samples: int = Field(default=10, ge=3, le=10_000, description="fewer samples per side: no verdict (not an alarm)")
    unhealthy_looks: int = Field(default=2, ge=1, le=1000, description="K: consecutive unhealthy looks before acting")
    healthy_looks: int = Field(default=6, ge=1, le=10_000,
                               description="hold-down: consecutive healthy looks of an evacuated region before it is restored")
    slo: dict[str, float] = Field(default_factory=dict, max_length=50,
                                  description="metric -> highest acceptable mean over the look's window (absolute SLO)")
    min_requests: float = Field(default=100, ge=1, le=1e9,
                                description="a percentile without buckets counts only from intervals of at least this many requests")
    volume_metric: str = Field(default="requests", min_length=1, max_length=100, pattern=r"^[A-Za-z_][A-Za-z0-9_.:-]*$",
                               description="the metric source's requests per interval (kind throughput), when it has one")
    history_days: int = Field(default=7, ge=0, le=28,
                              description="the same window on this many earlier days is each region's own reference")

    def config(self) -> JudgeConfig:
        return JudgeConfig(alpha=self.alpha, min_samples=self.min_samples)

    def look_level(self) -> float:
        """The false-alarm level one look of one region spends."""
        return monitor.look_alpha(self.alpha, 1, self.horizon_looks)


class RegionSamples(BaseModel):
    """One region's samples over the look's window, by metric name (oldest first), the requests it served in each
    interval (empty: the metric source does not say), and the same window on earlier days (its own history)."""

    region: str
    metrics: dict[str, list[float]] = Field(default_factory=dict)
    requests: list[float] | None = Field(default=None, description="requests per interval, aligned with the samples "
                                                                  "(None: unknown; empty: it served none)")
    history: list[RegionSamples] = Field(default_factory=list, description="the same window on earlier days")
    histograms: dict[str, Histogram] = Field(default_factory=dict,
                                             description="a latency metric's buckets over the window, when the source "
                                                         "gives them (then judged on every request, no floor)")


class RegionLook(BaseModel):
    """One region at one look: unhealthy (against its peers or an SLO), and why."""

    region: str
    unhealthy: bool
    no_data: bool = Field(default=False, description="too few samples for a verdict (counts as neither sick nor well)")
    reasons: list[str] = Field(default_factory=list)
    summary: str = ""
    monitor: MonitorResult | None = None
    degraded: bool = Field(default=False, description="worse than its own history at the same time of day")
    standing: str = Field(default="", description="worse than its peers but as it always is: why (not evacuated)")
    incident: list[str] = Field(default_factory=list, description="the regions of a multi-region incident, if any")
    suspect: list[str] = Field(default_factory=list,
                               description="regions possibly worse than their own history (a lenient test)")
    unsure: list[str] = Field(default_factory=list,
                              description="regions with too few requests to show a rise against their own history yet")
    requests: float | None = Field(default=None, description="requests it served in the window (None: unknown)")


def interleave(series: list[list[float]]) -> list[float]:
    """Peers' samples merged in time order (round robin), so a suffix window holds the latest of every peer."""
    out: list[float] = []
    longest = max((len(s) for s in series), default=0)
    for i in range(longest):
        back = longest - i
        out.extend(s[-back] for s in series if len(s) >= back)
    return out


def look_region(judge: GuardJudge, specs: list[MetricSpec], region: RegionSamples, peers: list[RegionSamples],
                look: int) -> RegionLook:
    """Judge one region at `look` (1, 2, ...): against its peers with the soak monitor, and against the SLOs."""
    reasons: list[str] = []
    for name, limit in sorted(judge.slo.items()):
        values = region.metrics.get(name, [])
        if values:
            mean = sum(values) / len(values)
            if mean > limit:
                reasons.append(f"{name}: mean {mean:.4g} above the SLO {limit:.4g}")
    result: MonitorResult | None = None
    no_data = False
    if peers:
        data = [MetricSamples(name=s.name, baseline=interleave([p.metrics.get(s.name, []) for p in peers]),
                              canary=list(region.metrics.get(s.name, []))) for s in specs]
        in_horizon = (look - 1) % judge.horizon_looks + 1
        result = monitor.look_bifrost(judge.config(), specs, data, look=in_horizon, max_looks=judge.horizon_looks,
                                      means_only=MEANS_ONLY)
        no_data = all(r.classification in ("Nodata", "Error") for r in result.metrics) if result.metrics else True
        if result.alarm:
            reasons += [f"vs peers {', '.join(p.region for p in peers)}: {r}" for r in result.reasons]
    else:
        no_data = not any(region.metrics.values())
    summary = "; ".join(reasons) if reasons else ("no data" if no_data else "healthy")
    if result is not None and not reasons:
        summary = result.summary.replace("canary", region.region).replace("baseline", "peers")
    return RegionLook(region=region.region, unhealthy=bool(reasons), no_data=no_data and not reasons,
                      reasons=reasons, summary=summary, monitor=result)


def look_fleet(judge: GuardJudge, specs: list[MetricSpec], serving: list[RegionSamples],
               others: list[RegionSamples], look: int) -> list[RegionLook]:
    """Every region at one look: a serving region against the other serving regions, and a region not serving
    (evacuated, being watched for its restore) against all serving ones. When every region says how many requests
    it served, the volume-aware judgement with two references (canary.guard (below)) decides."""
    if serving and all(r.requests is not None for r in serving + others):
        return judge_fleet(judge, specs, serving, others)
    out = [look_region(judge, specs, r, [p for p in serving if p.region != r.region], look) for r in serving]
    out += [look_region(judge, specs, r, serving, look) for r in others]
    return out


class Streak(BaseModel):
    """Looks in a row: unhealthy, healthy (on data), and calm (not unhealthy: healthy or no data)."""

    unhealthy: int = 0
    healthy: int = Field(default=0, description="no-data looks break neither this nor `unhealthy`")
    calm: int = Field(default=0, description="looks in a row not unhealthy: a drained region has no data to judge")

    def after(self, look: RegionLook) -> Streak:
        if look.unhealthy:
            return Streak(unhealthy=self.unhealthy + 1, healthy=0, calm=0)
        if look.no_data:
            return Streak(unhealthy=self.unhealthy, healthy=self.healthy, calm=self.calm + 1)
        return Streak(unhealthy=0, healthy=self.healthy + 1, calm=self.calm + 1)

    def sick(self, judge: GuardJudge) -> bool:
        return self.unhealthy >= judge.unhealthy_looks

    def well(self, judge: GuardJudge) -> bool:
        return self.healthy >= judge.healthy_looks

    def rested(self, judge: GuardJudge) -> bool:
        """The hold-down of an evacuated region: `healthy_looks` looks in a row without an unhealthy one. A drained
        region has no samples of its own, so its probe (judged on data) is what shows it is well."""
        return self.calm >= judge.healthy_looks


# -- when every region says how many requests it served: two references ---------------------------------
# The region guard's judgement when regions say how many requests they served: two references, not one.
#
# Each region is compared, metric by metric and weighted by volume (canary.guard_counts), with
# 1. **its own history**: the same window on earlier days, i.e. the same time of day where the region is; and
# 2. **its healthy peers**: the other serving regions that are not themselves worse than their own history.
#
# - **sick** (unhealthy): worse than its healthy peers and worse than its own history (or it has no history yet),
#   or confidently past an absolute SLO;
# - **standing difference**: worse than its peers but not than its own history: as it always is. Shown, not evacuated;
# - **degraded**: worse than its own history, but no healthy peer is better (a fleet-wide problem: moving traffic
#   would not help);
# - **no data**: it served no requests, or too few to tell (never healthy, never sick);
# - **incident**: two or more serving regions worse than their own history at once.
#
# The false-alarm budget of a look (`GuardJudge.look_level`) is split evenly over the metrics (Bonferroni); sick
# needs both tests to reject, so it spends no more than one.

SUSPECT_P = 0.01  # a peer this likely worse than its own history is no healthy reference (lenient on purpose)


@dataclass(frozen=True)
class History:
    """One region against its own history, metric by metric (None: no history that served requests), over the
    look's window and over the newest half of it (where a problem that has just begun shows first)."""

    by_metric: dict[str, Comparison | None]
    recent: dict[str, Comparison | None] = field(default_factory=dict)
    unsure: bool = False  # too few requests for the lenient test to see the gate's rise over the window

    @property
    def worse(self) -> bool:
        return any(c is not None and c.state == "worse" for c in self.by_metric.values())

    def suspect(self, specs: list[MetricSpec]) -> bool:
        """Possibly worse than usual, over the window or its newest half: a lenient test, to keep a degrading peer out
        of the healthy references (a peer whose trouble began a moment ago has it in its newest samples only)."""
        for s in specs:
            for c in (self.by_metric.get(s.name), self.recent.get(s.name)):
                if c is not None and c.p_value is not None and c.ratio is not None and c.p_value <= SUSPECT_P \
                        and c.ratio >= 1 + ((s.allowed_increase or 1.2) - 1) / 2:
                    return True
        return self.worse


def side(region: RegionSamples, name: str, newest: bool = False) -> Side:
    """One metric of a region with its requests (and pooled buckets); `newest`: the newest half of the window only."""
    values, requests = list(region.metrics.get(name, [])), list(region.requests or [])
    hist = region.histograms.get(name)
    if newest:
        half = (len(values) + 1) // 2
        values, requests = values[len(values) - half:], requests[len(values) - half:len(values)]
        hist = hist.newest() if hist is not None else None
    return Side(values, requests, Pooled.of(hist) if hist is not None else None, empty=False)


def pooled(regions: list[RegionSamples], name: str, newest: bool = False) -> Side:
    out = Side()
    for r in regions:
        out = out.plus(side(r, name, newest))
    return out


def served(region: RegionSamples) -> float:
    return float(sum(n for n in region.requests or [] if n > 0))


def _history(judge: GuardJudge, specs: list[MetricSpec], region: RegionSamples, level: float) -> History:
    past = [h for h in region.history if h.requests is not None and served(h) > 0]
    out: dict[str, Comparison | None] = {}
    recent: dict[str, Comparison | None] = {}
    unsure = False
    if not past or served(region) <= 0:
        return History({s.name: None for s in specs})
    for s in specs:
        now, usual = side(region, s.name), pooled(past, s.name)
        out[s.name] = compare(s, now, usual, level, min_requests=judge.min_requests, min_samples=judge.min_samples)
        recent[s.name] = compare(s, side(region, s.name, True), pooled(past, s.name, True), level,
                                 min_requests=judge.min_requests, min_samples=judge.min_samples)
        unsure = unsure or (not s.muted and compare(s, now, usual, SUSPECT_P, min_requests=judge.min_requests,
                                                    min_samples=judge.min_samples).state == "no_data")
    return History(out, recent, unsure)


def _region(judge: GuardJudge, specs: list[MetricSpec], region: RegionSamples, peers: list[RegionSamples],
            hist: History, level: float, incident: list[str], suspect: list[str], unsure: list[str]) -> RegionLook:
    n = served(region)
    base = dict(region=region.region, requests=n, degraded=hist.worse, incident=incident, suspect=suspect,
                unsure=unsure)
    if n <= 0:
        return RegionLook(**base, unhealthy=False, no_data=True, summary="no data: it served no requests")
    reasons = [why for s in specs if s.name in judge.slo and not s.muted
               for why in [slo_breach(s, side(region, s.name), judge.slo[s.name], level, judge.min_samples)] if why]
    sick, standing, seen, notes = [], [], [], []
    for s in specs:
        h = hist.by_metric.get(s.name)
        if not peers:
            if h is not None:
                notes.append(f"{h.text} against its own history")
            seen.append(h is not None and h.state != "no_data")
            continue
        c = compare(s, side(region, s.name), pooled(peers, s.name), level, min_requests=judge.min_requests,
                    min_samples=judge.min_samples)
        seen.append(c.state != "no_data")
        if c.state != "worse" or s.muted:
            notes.append(c.text)
            continue
        if h is None or h.state == "worse":
            vs = f" and its own history ({h.text})" if h is not None else " (no history yet)"
            sick.append(f"vs peers {', '.join(p.region for p in peers)}: {c.text}{vs}")
        else:
            standing.append(f"{c.text}, as usual at this time of day ({h.text})")
    reasons += sick
    no_data = not reasons and not any(seen)
    stand = "; ".join(standing) if not reasons else ""
    if reasons:
        summary = "; ".join(reasons)
    elif not peers and hist.worse:
        summary = "worse than its own history, as are its peers (no healthy peer to move to): " + "; ".join(notes)
    elif stand:
        summary = "standing difference: " + stand
    elif no_data:
        summary = "no data: " + "; ".join(notes)
    else:
        summary = ("healthy: " if peers else "healthy against its own history (no healthy peer): ") + "; ".join(notes)
    return RegionLook(**base, unhealthy=bool(reasons), no_data=no_data, reasons=reasons, summary=summary[:2000],
                      standing=stand[:1000])


def judge_fleet(judge: GuardJudge, specs: list[MetricSpec], serving: list[RegionSamples],
                others: list[RegionSamples]) -> list[RegionLook]:
    """Every region at one look (see the module's docstring); serving regions first, then the others."""
    active = [s for s in specs if not s.muted] or specs
    level = judge.look_level() / max(1, len(active))
    hist = {r.region: _history(judge, specs, r, level) for r in serving + others}
    incident = sorted(r.region for r in serving if hist[r.region].worse)
    incident = incident if len(incident) >= 2 else []
    healthy = [r for r in serving if not hist[r.region].suspect(specs)]
    suspect = sorted({r.region for r in serving} - {r.region for r in healthy})
    unsure = sorted(r.region for r in serving if hist[r.region].unsure)
    out = [_region(judge, specs, r, [p for p in healthy if p.region != r.region], hist[r.region], level, incident,
                   suspect, unsure) for r in serving]
    out += [_region(judge, specs, r, healthy, hist[r.region], level, incident, suspect, unsure) for r in others]
    return out
