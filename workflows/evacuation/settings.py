"""What asks for a traffic change by hand or from another workflow: `EvacuationInput`, one evacuation or restore of
one region of one service (a JSON object in the UI): the plan's input extended with the one model of a traffic
change's settings (common/traffic/settings.py), who asks and its approval.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field, model_validator

from canary.config import JudgeConfig
from common.text import Identity
from common.traffic.models import PlanInput, traffic_workflow_id
from common.traffic.settings import TrafficChangeSettings
from common.types import EnvKind
from workflows.request import MAX_APPROVAL_HOURS, MAX_TEXT


def evacuation_id(service: str) -> str:
    """One traffic workflow per service at a time: evacuations and restores of any region share this id, and the
    plan refuses to run under any other (activities/traffic/shift.py, `_own_id`)."""
    return traffic_workflow_id(service)


MAX_MIN_REPLICAS = 100_000  # bounds a hand-started restore's HPA floors (restore_to.min_replicas)


class EvacuationInput(TrafficChangeSettings, PlanInput):
    """Evacuate a region (move its traffic to the others, pre-warmed) or restore it (move the traffic back): what
    the plan takes (PlanInput), how the change goes (TrafficChangeSettings), who asks, and its approval.

    Strict and bounded: the UI's Start Workflow sends this as typed, so it gets the CLI's bounds and no coercion
    (`extra_wait_seconds: 1e12` or `"approval_timeout_minutes": 1e308` fail the start, naming the field)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    requested_by: Identity
    reason: str = Field(default="", max_length=MAX_TEXT)
    judge: JudgeConfig = Field(default_factory=JudgeConfig,
                               description="how each health look judges (mode, alpha, thresholds); its min_samples is min_samples")
    require_approval: bool = Field(default=False, description="wait for `approve` before changing anything")
    approvers: list[Identity] = Field(default_factory=list, max_length=1000, description="who may approve; empty: anyone who may send updates")
    approval_timeout_minutes: float = Field(default=60, gt=0, le=MAX_APPROVAL_HOURS * 60)

    @model_validator(mode="after")
    def _one_min_samples(self) -> EvacuationInput:
        """The health looks' judge needs as many samples as the settings say (one number, shown once)."""
        if self.judge.min_samples != self.min_samples:
            self.judge = self.judge.model_copy(update={"min_samples": self.min_samples})
        return self

    def problems(self, prefix: str = "") -> list[str]:
        """What is wrong across fields, one line each naming the field; the CLI and the workflow both refuse on it.

        Not a validator, so a UI start with bad steps is refused by the workflow with these reasons instead of
        failing to decode."""
        problems = super().problems(prefix)
        if self.region in self.receivers:
            problems.append(f"{prefix}receivers: {self.region} is the region being {self.direction}d; it cannot also receive")
        if len(set(self.receivers)) != len(self.receivers):
            problems.append(f"{prefix}receivers: each region may appear once; got {', '.join(self.receivers)}")
        if self.direction == "restore":
            if self.restore_to is None:
                problems.append(f"{prefix}restore_to: a restore needs the evacuation's weights_before and replicas_before; "
                                "`bifrost restore` reads them from the last evacuation")
            if self.receivers:
                problems.append(f"{prefix}receivers: a restore returns every region to its recorded weight; leave receivers out")
        elif self.restore_to is not None:
            problems.append(f"{prefix}restore_to: only a restore takes restore_to")
        if self.restore_to is not None:
            low = {r: n for r, n in self.restore_to.min_replicas.items() if not 1 <= n <= MAX_MIN_REPLICAS}
            if low:
                problems.append(f"{prefix}restore_to.min_replicas: an HPA's minReplicas is 1 to {MAX_MIN_REPLICAS}; got "
                                + ", ".join(f"{r}: {n}" for r, n in sorted(low.items())))
        if self.direction == "restore" and self.home_weights is not None:
            problems.append(f"{prefix}home_weights: a restore takes its home weights from restore_to.weights; leave home_weights out")
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
    def for_stage(cls, settings: TrafficChangeSettings, judge: JudgeConfig, *, service: str, region: str,
                  environment: EnvKind, reason: str) -> EvacuationInput:
        """The evacuation a failing stage with `on_failure: evacuate` runs, from its request's settings (its
        pre-shift window at least a minute) and its canary's judge."""
        return cls(service=service, region=region, environment=environment, direction="evacuate", requested_by="bifrost",
                   reason=reason, **settings.model_dump(exclude={"health_check_minutes"}),
                   health_check_minutes=max(1.0, settings.health_check_minutes), judge=judge)
