"""Inputs and outputs of the traffic activities besides the plan (common/traffic/models.py): one pydantic argument each.

Weights are keyed by set identifier (what the record set holds); replicas and health by region.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from canary.config import JudgeConfig, MetricSpec, MonitorResult
from common.types import NO_VERDICT, EnvKind, MetricWindow, StageRef


class SetWeightsInput(BaseModel):
    """Move the record set to `weights` if it still holds `expect`; a no-op when it already holds `weights`."""

    service: str
    environment: EnvKind = "prod"
    region: str = Field(description="a region of the record set: its target says where the record is")
    weights: dict[str, int]
    expect: dict[str, int]
    regions: dict[str, str] = Field(default_factory=dict, description="region -> set identifier, to report shares by region")
    why: str = ""


class SetWeightsResult(BaseModel):
    weights: dict[str, int]
    changed: bool = Field(description="False when the record set already held the weights (a retried or replayed step)")


class ScaleInput(BaseModel):
    """Scale a stage's primary up to at least (`up`) or down to at most (`down`) `replicas`, and wait until ready.

    Where an autoscaler (HPA) scales the primary, `up` raises its floor (minReplicas) to `replicas` instead and
    waits until it has scaled; `down` lowers the floor back to `min_replicas`, what the plan read before any change."""

    stage: StageRef
    replicas: int = Field(ge=0)
    direction: Literal["up", "down"] = "up"
    max_replicas: int | None = None
    autoscaler: str | None = Field(default=None, description="the HPA the plan found scaling the primary; None: none")
    min_replicas: int | None = Field(default=None, ge=1, description="down: the HPA's minReplicas to put back")


class ScaleResult(BaseModel):
    before: int
    after: int
    autoscaler: str | None = Field(default=None, description="the HPA whose floor was set instead of the replicas")
    min_before: int | None = None
    min_after: int | None = None


class RegionHealth(BaseModel):
    region: str
    metrics: list[MetricSpec]
    peer: str | None = Field(
        default=None, description="judge against this region's primary over the same window instead of the region's own "
        "pre-shift window (a restore: the restored region served nothing before, so its own window holds no data)")


class HealthInput(BaseModel):
    """Judge each region's primary after a step (`window`) against its own pre-shift window (`baseline_window`)."""

    service: str
    environment: EnvKind = "prod"
    regions: list[RegionHealth]
    baseline_window: MetricWindow
    window: MetricWindow
    baseline_version: str | None = Field(
        default=None, description="the version the primary ran in `baseline_window` (a revert); default: the one it runs now")
    judge: JudgeConfig
    look: int = Field(ge=1)
    max_looks: int = Field(ge=1)
    report_owner: str | None = Field(default=None, max_length=1000,
                                     description="file each region's report under this workflow id; None: name no report")
    report_id: str | None = Field(default=None, max_length=150,
                                  description="the look's analysis id; each region's report is `<report_id>-<region>`")

    def region_report_id(self, region: str) -> str | None:
        """The analysis id of `region`'s report of this look, or None when no report is asked for."""
        return f"{self.report_id}-{region}" if self.report_id else None


class RegionVerdict(BaseModel):
    region: str
    version: str | None
    monitor: MonitorResult | None = None
    note: str = ""
    report_url: str | None = Field(default=None, description="where this region's report of the look will open")


class HealthResult(BaseModel):
    alarm: bool
    regions: list[RegionVerdict]

    @property
    def summary(self) -> str:
        parts = []
        for r in self.regions:
            text = r.monitor.summary if r.monitor is not None else r.note
            parts.append(f"{r.region}: {text}")
        return "; ".join(parts)

    @property
    def no_data(self) -> list[str]:
        """What this look could not compare: a region with nothing to measure, or a metric without a verdict (no
        samples on a side). Such a look is neither healthy nor an alarm; it is "no data"."""
        out = [f"{r.region}: {r.note or 'not measured'}" for r in self.regions if r.monitor is None]
        return out + [f"{r.region} {m.name}" for r in self.regions if r.monitor is not None
                      for m in r.monitor.metrics if not m.muted and m.classification in NO_VERDICT]

    @property
    def reasons(self) -> list[str]:
        return [f"{r.region} {reason}" for r in self.regions if r.monitor is not None and r.monitor.alarm
                for reason in r.monitor.reasons]


class ReadTrafficInput(BaseModel):
    """Read the record set's weights and the replicas of some regions (to report the truth at the end)."""

    service: str
    environment: EnvKind = "prod"
    region: str
    replicas_of: list[str] = Field(default_factory=list)


class TrafficSnapshot(BaseModel):
    weights: dict[str, int]
    replicas: dict[str, int]


class RegionWeightsInput(BaseModel):
    """Which of `regions` serve traffic now: their weights in the service's record set (read-only)."""

    service: str
    environment: EnvKind = "prod"
    regions: list[str]


class RegionWeights(BaseModel):
    """The weights by region of the regions asked about that have a traffic target (the rest are not managed)."""

    weights: dict[str, int] = Field(default_factory=dict, description="region -> weight, as the record set holds it now")
    total: int = Field(default=0, description="the record set's total weight")
