"""Input and output of the region guard's look activity: single pydantic arguments, safe to evolve by adding fields."""

from __future__ import annotations

from pydantic import BaseModel, Field

from canary.config import MetricSpec
from canary.guard import GuardJudge, RegionLook
from common.types import EnvKind


class GuardLookInput(BaseModel):
    """One look of the guard at a service: every region's recent samples, judged against its peers."""

    service: str
    environment: EnvKind = "prod"
    look: int = Field(ge=1)
    window_seconds: int = Field(ge=1)
    sample_interval_seconds: int = Field(ge=1)
    judge: GuardJudge
    metrics: list[MetricSpec] = Field(default_factory=list, description="empty: the regions' traffic.health")
    steps: list[int] = Field(description="the evacuation's steps, for the readiness plan")
    headroom: float = 1.2
    prewarm: bool = True
    home_weights: dict[str, int] | None = None
    readiness: bool = Field(default=True, description="also plan (read-only) an evacuation of every serving region")


class Readiness(BaseModel):
    """Whether an evacuation of `region` could start now: the evacuation's own read-only plan, or why not.

    The one readiness model: the look activity returns it, the guard keeps it per region and its rules judge it."""

    region: str
    ready: bool
    problems: list[str] = Field(default_factory=list)
    receivers: dict[str, str] = Field(default_factory=dict, description="receiver -> 'replicas now → after pre-warm'")


class GuardLookResult(BaseModel):
    """What one look saw: the weights (by region), who serves, each region's verdict, and readiness."""

    weights: dict[str, int]
    serving: list[str]
    looks: list[RegionLook]
    readiness: list[Readiness] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
