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

from pydantic import BaseModel, ConfigDict, Field

from canary import monitor
from canary.config import JudgeConfig, MetricSamples, MetricSpec, MonitorResult

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

    def config(self) -> JudgeConfig:
        return JudgeConfig(alpha=self.alpha, min_samples=self.min_samples)

    def look_level(self) -> float:
        """The false-alarm level one look of one region spends."""
        return monitor.look_alpha(self.alpha, 1, self.horizon_looks)


class RegionSamples(BaseModel):
    """One region's samples over the look's window, by metric name (oldest first)."""

    region: str
    metrics: dict[str, list[float]] = Field(default_factory=dict)


class RegionLook(BaseModel):
    """One region at one look: unhealthy (against its peers or an SLO), and why."""

    region: str
    unhealthy: bool
    no_data: bool = Field(default=False, description="too few samples for a verdict (counts as neither sick nor well)")
    reasons: list[str] = Field(default_factory=list)
    summary: str = ""
    monitor: MonitorResult | None = None


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
    (evacuated, being watched for its restore) against all serving ones."""
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
