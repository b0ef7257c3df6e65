"""What the evacuation workflow reports and returns, and the payloads of its updates.

- `EvacuationState`: the `status` query's answer and the workflow's result: weights and replicas before and
  after, every step with its health verdict, and the audit trail.
- `EvacuationInput` (what it takes) is in settings.py, and importable from here too.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import AliasChoices, BaseModel, Field, model_validator

from canary.config import JudgeConfig, MetricResult
from common.text import Identity
from common.traffic.models import RestoreTarget, TrafficDirection, TrafficPlan
from common.traffic.plan import DEFAULT_STEPS
from common.traffic.settings import TrafficChangeSettings
from common.types import EnvKind
from common.vocabulary import EVACUATION_TERMINAL, EvacuationPhase, EvacuationStatus
from workflows.controls import AuditEntry, Hold, Payload
from workflows.controls.state import ControlledState
from workflows.evacuation.settings import EvacuationInput


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
    healthy: bool | None = Field(default=None, description="None: not checked yet, or checked with no data")
    health: str = ""
    compared_with: dict[str, str] = Field(default_factory=dict,
                                          description="region -> what its 'before' is, when not its own pre-shift window")
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
    health: TrafficChangeSettings = Field(default_factory=TrafficChangeSettings,
                                          description="the input's traffic-change settings; a restore reuses them",
                                          validation_alias=AliasChoices("health", "health_settings"))
    judge: JudgeConfig | None = Field(default=None, description="the input's judge; a restore judges as it did")
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

    @model_validator(mode="before")
    @classmethod
    def _judge_beside_health(cls, data: Any) -> Any:
        """States written before kept the judge inside `health`: it sits beside it now (old results still decode)."""
        if isinstance(data, dict) and isinstance(data.get("health"), dict) and "judge" in data["health"]:
            data = {**data, "health": dict(data["health"])}
            data.setdefault("judge", data["health"]["judge"])
        return data

    @property
    def finished(self) -> bool:
        return self.status in EVACUATION_TERMINAL

    @classmethod
    def of(cls, inp: EvacuationInput, workflow_id: str) -> "EvacuationState":
        return cls(workflow_id=workflow_id, service=inp.service, region=inp.region, environment=inp.environment,
                   direction=inp.direction, requested_by=inp.requested_by, request_reason=inp.reason,
                   steps_requested=list(inp.steps), judge=inp.judge,
                   health=TrafficChangeSettings(**{name: getattr(inp, name) for name in TrafficChangeSettings.model_fields}))

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
            **self.health.model_dump(), **({"judge": self.judge} if self.judge is not None else {}),
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
