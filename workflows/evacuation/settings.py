"""What asks for a traffic change: `EvacuationInput`, one evacuation or restore of one region of one service (a
JSON object in the UI), and the health settings it carries into the state (a restore checks as its evacuation did).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from canary.config import JudgeConfig
from common.text import Identity
from common.traffic.models import (
    Headroom,
    HealthInterval,
    PlanInput,
    RestoreTarget,
    TrafficDirection,
    traffic_workflow_id,
)
from common.traffic.plan import DEFAULT_STEPS, MAX_STEPS, step_problems
from common.types import EnvKind
from workflows.request import (
    MAX_ANALYSIS_MINUTES,
    MAX_APPROVAL_HOURS,
    MAX_REGIONS,
    MAX_SERVICE_LEN,
    MAX_TEXT,
    EvacuationSettings,
)


def evacuation_id(service: str) -> str:
    """One traffic workflow per service at a time: evacuations and restores of any region share this id, and the
    plan refuses to run under any other (activities/traffic/shift.py, `_own_id`)."""
    return traffic_workflow_id(service)


MAX_MIN_REPLICAS = 100_000  # bounds a hand-started restore's HPA floors (restore_to.min_replicas)
MAX_EXTRA_WAIT_SECONDS = 86_400  # a day past the TTL after each step; Route 53 TTLs are at most 2 days anyway

def _health_judge() -> JudgeConfig:
    return JudgeConfig(min_samples=10)


class HealthSettings(BaseModel):
    """How a traffic change waits and checks the regions that gain traffic after each step. Part of the input, and
    kept in the state, so a restore checks as its evacuation did."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    extra_wait_seconds: int = Field(default=0, ge=0, le=MAX_EXTRA_WAIT_SECONDS,
                                    description="wait this much longer than the TTL after each step")
    health_baseline_minutes: float = Field(default=10, gt=0, le=MAX_ANALYSIS_MINUTES,
                                           description="the pre-shift window each region is judged against")
    health_interval_seconds: HealthInterval = Field(
        default=5, description="sample spacing of the health metrics; each step waits for judge.min_samples of them")
    judge: JudgeConfig = Field(default_factory=_health_judge, description="the soak monitor's settings for health checks")


class EvacuationInput(HealthSettings):
    """Evacuate a region (move its traffic to the others, pre-warmed) or restore it (move the traffic back).

    Strict and bounded: the UI's Start Workflow sends this as typed, so it gets the CLI's bounds and no coercion
    (`extra_wait_seconds: 1e12` or `"approval_timeout_minutes": 1e308` fail the start, naming the field)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    service: str = Field(min_length=1, max_length=MAX_SERVICE_LEN, pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
    region: str = Field(min_length=1, max_length=63, description="the region to evacuate or restore")
    direction: TrafficDirection = "evacuate"
    environment: EnvKind = "prod"
    requested_by: Identity
    reason: str = Field(default="", max_length=MAX_TEXT)
    receivers: list[Annotated[str, Field(min_length=1, max_length=63)]] = Field(
        default_factory=list, max_length=MAX_REGIONS, description="default: every other region serving the record set")
    steps: list[int] = Field(
        default_factory=lambda: list(DEFAULT_STEPS), max_length=MAX_STEPS,
        description="the region's weight in percent of its starting share after each step (a restore walks them back)",
    )
    headroom: Headroom = 1.2
    prewarm: bool = Field(default=True, description="false: shift without scaling the receivers first")
    restore_to: RestoreTarget | None = Field(default=None, description="restore: the home weights and the replicas before")
    home_weights: dict[str, int] | None = Field(
        default=None, description="evacuate: the weights with no region evacuated, when another region already is "
        "(the CLI takes them from the last traffic change); default: the weights now")
    require_approval: bool = Field(default=False, description="wait for `approve` before changing anything")
    approvers: list[Identity] = Field(default_factory=list, max_length=1000, description="who may approve; empty: anyone who may send updates")
    approval_timeout_minutes: float = Field(default=60, gt=0, le=MAX_APPROVAL_HOURS * 60)

    def problems(self) -> list[str]:
        """What is wrong across fields, one line each naming the field; the CLI and the workflow both refuse on it.

        Not a validator, so a UI start with bad steps is refused by the workflow with these reasons instead of
        failing to decode."""
        problems = step_problems(self.steps)
        if self.region in self.receivers:
            problems.append(f"receivers: {self.region} is the region being {self.direction}d; it cannot also receive")
        if len(set(self.receivers)) != len(self.receivers):
            problems.append(f"receivers: each region may appear once; got {', '.join(self.receivers)}")
        if self.direction == "restore":
            if self.restore_to is None:
                problems.append("restore_to: a restore needs the evacuation's weights_before and replicas_before; "
                                "`bifrost restore` reads them from the last evacuation")
            if self.receivers:
                problems.append("receivers: a restore returns every region to its recorded weight; leave receivers out")
        elif self.restore_to is not None:
            problems.append("restore_to: only a restore takes restore_to")
        if self.restore_to is not None:
            low = {r: n for r, n in self.restore_to.min_replicas.items() if not 1 <= n <= MAX_MIN_REPLICAS}
            if low:
                problems.append(f"restore_to.min_replicas: an HPA's minReplicas is 1 to {MAX_MIN_REPLICAS}; got "
                                + ", ".join(f"{r}: {n}" for r, n in sorted(low.items())))
        if self.direction == "restore" and self.home_weights is not None:
            problems.append("home_weights: a restore takes its home weights from restore_to.weights; leave home_weights out")
        return problems

    @property
    def workflow_id(self) -> str:
        return evacuation_id(self.service)

    def plan_input(self) -> PlanInput:
        """What the plan activity checks against the live record set and fleet."""
        return PlanInput(service=self.service, region=self.region, environment=self.environment,
                         direction=self.direction, receivers=self.receivers, steps=self.steps, headroom=self.headroom,
                         prewarm=self.prewarm, restore_to=self.restore_to, home_weights=self.home_weights)

    @classmethod
    def for_stage(cls, settings: EvacuationSettings, judge: JudgeConfig, *, service: str, region: str,
                  environment: EnvKind, reason: str) -> EvacuationInput:
        """The evacuation a failing stage with `on_failure: evacuate` runs, from its request's settings: the one
        mapping from the request's `evacuation` to this input."""
        return cls(service=service, region=region, environment=environment, direction="evacuate", requested_by="bifrost",
                   reason=reason, steps=list(settings.steps), headroom=settings.headroom,
                   health_interval_seconds=settings.health_interval_seconds,
                   health_baseline_minutes=max(1.0, settings.health_check_minutes),
                   judge=judge.model_copy(update={"min_samples": settings.min_samples}))

    def step_wait_seconds(self, ttl_wait: int) -> int:
        """The wait after each step: the TTL (plus extra), and long enough for the judge to get its minimum samples."""
        return max(ttl_wait + self.extra_wait_seconds, self.judge.min_samples * self.health_interval_seconds)
