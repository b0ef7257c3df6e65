"""What the evacuation workflow takes, reports and returns, and the payloads of its updates.

- `EvacuationInput`: one evacuation or restore of one region of one service (a JSON object in the UI).
- `EvacuationState`: the `status` query's answer and the workflow's result: weights and replicas before and
  after, every step with its health verdict, and the audit trail.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from canary.config import JudgeConfig, MetricResult
from common.text import Identity
from common.traffic.models import (
    Headroom,
    HealthInterval,
    RestoreTarget,
    TrafficDirection,
    TrafficPlan,
    traffic_workflow_id,
)
from common.traffic.plan import DEFAULT_STEPS, MAX_STEPS, step_problems
from common.types import EnvKind
from common.vocabulary import EVACUATION_TERMINAL as EVACUATION_TERMINAL
from common.vocabulary import EvacuationPhase as EvacuationPhase
from common.vocabulary import EvacuationStatus as EvacuationStatus
from workflows.controls import AuditEntry, Hold, Payload
from workflows.controls.state import ControlledState
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


class HealthValue(BaseModel):
    """One metric of one receiving region in a health look: its mean before the shift and after the step."""

    region: str
    metric: str
    before: float | None = None
    after: float | None = None
    before_n: int = 0
    after_n: int = 0
    classification: str = ""
    critical: bool = False

    @classmethod
    def of(cls, region: str, m: MetricResult) -> HealthValue:
        return cls(region=region, metric=m.name, before=m.baseline_mean, after=m.canary_mean, before_n=m.baseline_n,
                   after_n=m.canary_n, classification=m.classification, critical=m.critical)


class StepRecord(BaseModel):
    """One traffic step: the weights it set, when, and what the health check after it said."""

    index: int
    level: int = Field(description="the region's weight after the step, in percent of its reference share")
    weights: dict[str, int]
    changed: bool = True
    started_at: datetime | None = None
    applied_at: datetime | None = None
    health_started_at: datetime | None = Field(default=None, description="when the TTL wait ended and the health check began")
    checked_at: datetime | None = None
    healthy: bool | None = None
    health: str = ""
    values: list[HealthValue] = Field(default_factory=list, description="the health look's means, per region and metric")
    reports: dict[str, str] = Field(default_factory=dict, description="region -> where its report of this look opens")


class EvacuationState(ControlledState[EvacuationStatus]):
    """The whole evacuation or restore: plan, weights and replicas before/now, steps, audit; also the result."""

    TERMINAL = EVACUATION_TERMINAL
    workflow_id: str
    service: str
    region: str
    environment: EnvKind = "prod"
    direction: TrafficDirection = "evacuate"
    phase: EvacuationPhase = "planning"
    holds: list[Hold] = Field(default_factory=list, description="what keeps it from going on: a pause, an approval")
    doing: str | None = Field(default=None, description="what it works on now, when no hold holds it")
    reason: str = Field(default="", description="why it ended, or is where it is")
    requested_by: str = ""
    request_reason: str = ""
    record_set: str = ""
    receivers: list[str] = Field(default_factory=list)
    set_identifiers: dict[str, str] = Field(default_factory=dict, description="region -> set identifier")
    steps_requested: list[int] = Field(default_factory=list)
    health: HealthSettings = Field(default_factory=HealthSettings, description="the input's health settings; a restore reuses them",
                                   validation_alias=AliasChoices("health", "health_settings"))
    planned: list[dict[str, int]] = Field(default_factory=list, description="weights after each planned step")
    step: int = Field(default=0, description="steps applied and still in force")
    weights_before: dict[str, int] = Field(default_factory=dict)
    home_weights: dict[str, int] = Field(default_factory=dict, description="the weights with no region evacuated")
    weights_now: dict[str, int] = Field(default_factory=dict)
    weights_after: dict[str, int] = Field(default_factory=dict, description="read back when the workflow ended")
    replicas_before: dict[str, int] = Field(default_factory=dict, description="by region, before anything changed")
    replicas_after: dict[str, int] = Field(default_factory=dict, description="by region, read back at the end")
    scaled: dict[str, int] = Field(default_factory=dict, description="regions this workflow scaled, to how many")
    autoscalers: dict[str, str] = Field(default_factory=dict, description="region -> the HPA scaling its primary (plan)")
    min_replicas_before: dict[str, int] = Field(
        default_factory=dict, description="region -> its HPA's minReplicas as the plan read it, before any change")
    min_replicas_now: dict[str, int] = Field(
        default_factory=dict, description="region -> its HPA's minReplicas as this workflow last read or set it")
    raised: dict[str, int] = Field(
        default_factory=dict, description="region -> the HPA floor this workflow raised it to and has not put back; "
        "recorded before the change, so a crash between raise and put-back still knows what to put back")
    wait_seconds: int = Field(default=0, description="wait after each step: TTL + extra, at least min_samples x interval")
    ttl_seconds: int = Field(default=0, description="the record set's TTL, as the plan read it (0: not planned yet)")
    settle_seconds: int = Field(default=0, description="the plan's wait: the TTL, or a target's longer minimum wait")
    levels: list[int] = Field(default_factory=list, description="the region's level after each planned step, in order")
    steps: list[StepRecord] = Field(default_factory=list)
    audit: list[AuditEntry] = Field(default_factory=list)
    started_at: datetime | None = None
    planned_at: datetime | None = None
    prewarmed_at: datetime | None = None
    ended_at: datetime | None = None

    @property
    def finished(self) -> bool:
        return self.status in EVACUATION_TERMINAL

    @classmethod
    def of(cls, inp: EvacuationInput, workflow_id: str) -> "EvacuationState":
        return cls(workflow_id=workflow_id, service=inp.service, region=inp.region, environment=inp.environment,
                   direction=inp.direction, requested_by=inp.requested_by, request_reason=inp.reason,
                   steps_requested=list(inp.steps),
                   health=HealthSettings(**{name: getattr(inp, name) for name in HealthSettings.model_fields}))

    def take_plan(self, plan: TrafficPlan) -> None:
        """Record what the plan activity found and worked out."""
        self.record_set = plan.record_set
        self.set_identifiers = plan.set_identifiers
        self.receivers = [r.region for r in plan.regions if r.role == "receiver"]
        self.planned = plan.steps
        self.weights_before = dict(plan.weights_before)
        self.home_weights = dict(plan.home_weights or plan.weights_before)
        self.weights_now = dict(plan.weights_before)
        self.replicas_before = {r.region: r.replicas_before for r in plan.regions if r.replicas_before is not None}
        self.autoscalers = {r.region: r.autoscaler for r in plan.regions if r.autoscaler is not None}
        self.min_replicas_before = {r.region: r.min_replicas for r in plan.regions if r.min_replicas is not None}
        self.min_replicas_now = dict(self.min_replicas_before)
        self.wait_seconds = plan.wait_seconds
        self.ttl_seconds = plan.ttl_seconds
        self.settle_seconds = plan.wait_seconds
        self.levels = list(plan.levels)

    def restore_input(self, *, requested_by: str, reason: str = "") -> EvacuationInput:
        """The input that returns this evacuation's region to its weights and replicas before."""
        if self.direction != "evacuate":
            raise ValueError(f"{self.workflow_id} was a {self.direction}, not an evacuation; there is nothing to restore from it")
        if not self.weights_before:
            raise ValueError(f"the evacuation of {self.region} ended as {self.status} before it read the weights; "
                             "nothing was changed, so there is nothing to restore")
        return EvacuationInput.model_validate({
            **self.health.model_dump(),
            "service": self.service, "region": self.region, "environment": self.environment, "direction": "restore",
            "requested_by": requested_by, "reason": reason or f"restore after: {self.request_reason}".strip(),
            "steps": self.steps_requested or list(DEFAULT_STEPS),
            "restore_to": RestoreTarget(weights=dict(self.home_weights or self.weights_before),
                                        replicas=dict(self.replicas_before),
                                        min_replicas={r: self.min_replicas_before[r] for r in self.raised
                                                      if r in self.min_replicas_before}),
        })


def aborted_message(state: EvacuationState) -> str:
    """How an aborted evacuation or restore ends, in one line: "evacuate of eu-west-1 aborted by dave: why"."""
    what = f"{state.direction} of {state.region}"
    return f"{what} {state.reason}" if state.reason.startswith("aborted ") else f"{what} aborted: {state.reason}"


class ApproveShift(Payload):
    """{"approver": "alice", "comment": "go"} — lets an evacuation that waits for approval start changing traffic."""

    approver: Identity
    comment: str = ""


class AbortShift(Payload):
    """{"by": "alice", "reason": "why", "revert": true} — stop; revert=true puts the weights (and replicas) back."""

    by: Identity
    reason: str = Field(min_length=1)
    revert: bool = True
