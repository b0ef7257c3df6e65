"""What an evacuation or restore asks for and the plan that answers it: pure pydantic, shared by the request, the
plan activity and the evacuation workflow.

Weights are keyed by set identifier (what the record set holds); replicas and health by region.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from common.metric_spec import MetricSpec
from common.types import EnvKind

TrafficDirection = Literal["evacuate", "restore"]

# The types of the knobs every traffic change takes; common/traffic/settings.py gathers them into one model.
DEFAULT_STEPS = [67, 33, 0]
MAX_STEPS = 20
MAX_REGIONS = 64  # regions in one request, or named in one traffic change
MAX_SERVICE_LEN = 50  # "<service>-baseline" must stay a 63-character Kubernetes name
MAX_HEALTH_INTERVAL_SECONDS = 3600
Steps = Annotated[list[int], Field(
    max_length=MAX_STEPS, description="the region's weight in percent of its starting share after each step (a restore walks them back)")]
ServiceName = Annotated[str, Field(min_length=1, max_length=MAX_SERVICE_LEN, pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")]
RegionName = Annotated[str, Field(min_length=1, max_length=63)]
Headroom = Annotated[float, Field(ge=1.0, le=10.0, description="pre-warm receivers to new/old share x headroom")]
HealthInterval = Annotated[int, Field(ge=1, le=MAX_HEALTH_INTERVAL_SECONDS,
                                      description="sample spacing of the health checks, in seconds")]


class RestoreTarget(BaseModel):
    """Where a restore returns to: the home weights (by set identifier: no region evacuated) and each region's replicas.

    The plan starts from the weights as they are now and leaves any other region that is evacuated where it is."""

    weights: dict[str, int]
    replicas: dict[str, int] = Field(default_factory=dict, description="by region; regions left out are not scaled")
    min_replicas: dict[str, int] = Field(
        default_factory=dict, description="by region: the HPA floors (minReplicas) the evacuation raised, as they were before")


def traffic_workflow_id(service: str) -> str:
    """The one workflow id under which a traffic change of `service` may run (the claim: one change at a time)."""
    return f"traffic/{service}"


class PlanInput(BaseModel):
    """What an evacuation or restore asks for; the plan activity checks it against the live record set and fleet.
    Bounded here once: EvacuationInput extends it."""

    service: ServiceName
    region: RegionName = Field(description="the region to evacuate or restore")
    environment: EnvKind = "prod"
    direction: TrafficDirection = "evacuate"
    receivers: list[RegionName] = Field(default_factory=list, max_length=MAX_REGIONS,
                                        description="default: every other region serving the record set")
    steps: Steps = Field(default_factory=lambda: list(DEFAULT_STEPS))
    headroom: Headroom = 1.2
    prewarm: bool = Field(default=True, description="false: shift without scaling the receivers first")
    restore_to: RestoreTarget | None = Field(default=None, description="restore: the home weights and the replicas before")
    home_weights: dict[str, int] | None = Field(
        default=None, description="evacuate: the weights with no region evacuated, when another region already is "
        "(the CLI takes them from the last traffic change); default: the weights now")


RegionRole = Literal["evacuated", "restored", "receiver", "other"]


class RegionPlan(BaseModel):
    """One region of the record set: its part, weight, replicas now and what the shift will make of them."""

    region: str
    set_identifier: str
    role: RegionRole
    weight_before: int
    weight_after: int
    replicas_before: int | None = None  # None: not read (a region Bifrost does not scale or check)
    prewarm_to: int | None = None  # scale up to this before the first step (None: no change)
    scale_down_to: int | None = None  # after the last step (restore only)
    max_replicas: int | None = None
    health: list[MetricSpec] = Field(default_factory=list)
    autoscaler: str | None = Field(default=None, description="the HPA scaling its primary: pre-warm raises its floor")
    min_replicas: int | None = Field(default=None, description="that HPA's minReplicas when planned, before any change")
    autoscaler_max: int | None = Field(default=None, description="that HPA's maxReplicas")

    share_grows: bool | None = Field(default=None, description="its share of traffic grows at some step (None: older plans)")

    @property
    def gains(self) -> bool:
        """Whether this region's traffic grows during the shift (it is then pre-warmed and health-checked).

        By share, not weight: with weights capped at 255 a region's share can grow while its weight stays."""
        grows = self.weight_after > self.weight_before if self.share_grows is None else self.share_grows
        return grows and self.role in ("receiver", "restored")


class TrafficPlan(BaseModel):
    """Everything the workflow needs to shift: the weights after every step, who gains, how long to wait."""

    service: str
    environment: EnvKind
    region: str
    direction: TrafficDirection
    record_set: str
    weights_before: dict[str, int]
    home_weights: dict[str, int] = Field(default_factory=dict, description="the weights with no region evacuated")
    steps: list[dict[str, int]] = Field(description="the record set's weights after each step")
    levels: list[int] = Field(description="the region's weight after each step, in percent of its reference share")
    regions: list[RegionPlan]
    ttl_seconds: int
    wait_seconds: int = Field(description="wait after each step: at least the TTL")
    notes: list[str] = Field(default_factory=list)

    def region_plan(self, region: str) -> RegionPlan | None:
        return next((r for r in self.regions if r.region == region), None)

    @property
    def set_identifiers(self) -> dict[str, str]:
        """Region -> set identifier, for the regions Bifrost knows."""
        return {r.region: r.set_identifier for r in self.regions}

    @property
    def gaining(self) -> list[RegionPlan]:
        return [r for r in self.regions if r.gains]
