"""What the region guard takes, keeps and reports, and the payloads of its updates.

- `GuardInput`: the service, the rules (`GuardRules`: what the guard may do on its own) and the judgement
  settings, and (after a continue-as-new) the state.
- `GuardState`: the `status` query's answer and what a continue-as-new carries: every region's streaks, verdict
  and readiness, the guard's evacuations, pending proposals, decisions and the audit trail.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from activities.guard_models import Readiness
from canary.config import MetricSpec
from canary.guard import GuardJudge, Streak
from common.text import Identity
from common.traffic.models import MAX_SERVICE_LEN, Steps
from common.traffic.settings import TrafficChangeSettings, lift
from common.types import EnvKind
from common.vocabulary import GUARD_TERMINAL, GuardPhase, GuardStatus
from workflows.controls import AuditEntry, Hold, Payload
from workflows.controls.state import ControlledState
from workflows.evacuation.models import HealthValue
from workflows.evacuation.settings import EvacuationInput
from workflows.request import MAX_TEXT, DeployWindow, Region, TimeZone
from workflows.windows import is_open

DEFAULT_GUARD_STEPS = [50, 10, 0]  # a restore walks back through 10% (the probe), 50%, 100%
MAX_AUDIT = 200  # entries a continue-as-new carries
MAX_DECISIONS = 50
MAX_EVACUATIONS = 10  # per region, the latest


class GuardEvacuation(TrafficChangeSettings):
    """A guard's (and a drill's) traffic change: the one settings model, with levels whose restore walks back
    through 10% (the probe), 50%, 100%."""

    steps: Steps = Field(default_factory=lambda: list(DEFAULT_GUARD_STEPS))


# where the guard's input held these settings before `evacuation` (old inputs still decode)
GUARD_FLAT = {"steps": "steps", "headroom": "headroom", "evacuation_health_interval_seconds": "health_interval_seconds",
              "evacuation_min_samples": "min_samples"}


def guard_id(service: str) -> str:
    """One guard per service."""
    return f"guard/{service}"


GuardMode = Literal["auto", "propose"]


class GuardRules(BaseModel):
    """What the guard may do on its own; every field is input (docs/guard.md#the-rules-and-proposals)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    mode: GuardMode = Field(default="propose", description="auto: evacuate by itself; propose: wait for approval")
    restore: GuardMode = Field(default="auto", description="auto: restore after the hold-down; propose: wait for approval")
    max_evacuated: int = Field(default=1, ge=1, le=50, description="M: at most this many regions evacuated at once")
    min_gap_minutes: float = Field(default=60, ge=0, le=7 * 24 * 60,
                                   description="between two automatic evacuations; inside it the guard only proposes")
    quiet_windows: list[DeployWindow] = Field(default_factory=list, max_length=50,
                                              description="weekly windows in which the guard only proposes")
    timezone: TimeZone = Field(default="UTC", description="IANA zone of the quiet windows")
    backoff_hours: float = Field(default=24, ge=0, le=24 * 90,
                                 description="after a restore, evacuating the same region again within this many "
                                             "hours needs twice the unhealthy looks per restore in it")

    def quiet(self, at: datetime) -> bool:
        """Whether `at` falls inside a quiet window."""
        return bool(self.quiet_windows) and is_open(
            Region(name="quiet", timezone=self.timezone, windows=self.quiet_windows), at)


class GuardInput(BaseModel):
    """Watch one service's regions; evacuate (or propose to) a sick one, restore it when well.

    Strict and bounded: the UI's Start Workflow sends this as typed."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    service: str = Field(min_length=1, max_length=MAX_SERVICE_LEN, pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
    environment: EnvKind = "prod"
    requested_by: Identity
    reason: str = Field(default="", max_length=MAX_TEXT)
    rules: GuardRules = Field(default_factory=GuardRules)
    judge: GuardJudge = Field(default_factory=GuardJudge)
    metrics: list[MetricSpec] = Field(default_factory=list, max_length=20, description="empty: the regions' traffic.health")
    look_interval_seconds: int = Field(default=60, ge=1, le=3600, description="time between two looks")
    window_seconds: int = Field(default=120, ge=1, le=86_400, description="each look judges the samples of this window")
    sample_interval_seconds: int = Field(default=3, ge=1, le=3600, description="sample spacing of the health metrics")
    evacuation: GuardEvacuation = Field(default_factory=lambda: GuardEvacuation(),
                                        description="how its evacuations go (steps, headroom, health checks)")
    probe_percent: int = Field(default=10, ge=0, le=99,
                               description="a restore first gives back this much of the region's share (0: no probe)")
    probe_looks: int = Field(default=3, ge=1, le=1000, description="healthy looks of the probe before the rest")
    approvers: list[Identity] = Field(default_factory=list, max_length=1000, description="who may approve or dismiss a proposal; empty: anyone who may send updates")
    looks_per_run: int = Field(default=500, ge=1, le=10_000, description="continue as new after this many looks")
    state: GuardState | None = Field(default=None, description="carried by continue-as-new; leave out")

    @model_validator(mode="before")
    @classmethod
    def _flat_settings(cls, data: Any) -> Any:
        """Inputs written before `evacuation` gave its settings flat (GUARD_FLAT): moved into it."""
        return lift(data, "evacuation", GUARD_FLAT)

    def problems(self) -> list[str]:
        """What is wrong across fields, one line each naming the field (the workflow refuses on it)."""
        problems = self.evacuation.problems("evacuation.")
        if self.window_seconds < self.sample_interval_seconds * self.judge.min_samples:
            problems.append(f"window_seconds: {self.window_seconds} s holds fewer than judge.min_samples "
                            f"({self.judge.min_samples}) samples {self.sample_interval_seconds} s apart")
        unknown = sorted(set(self.judge.slo) - {m.name for m in self.metrics}) if self.metrics else []
        if unknown:
            problems.append(f"judge.slo: {', '.join(unknown)} not among the metrics")
        return problems


class EvacuationRecord(BaseModel):
    """One evacuation of a region by the guard: when, why, and when it was restored (None: not yet)."""

    evacuated_at: datetime
    why: str = ""
    restored_at: datetime | None = None


class RegionWatch(BaseModel):
    """One region as the guard sees it."""

    region: str
    weight: int = 0
    serving: bool = True
    streak: Streak = Field(default_factory=Streak)
    verdict: str = ""
    values: list[HealthValue] = Field(default_factory=list, description="the last look's means and n: region vs its peers")
    no_data: bool = Field(default=False, description="the last look compared nothing (never shown as healthy)")
    unhealthy: bool = False
    readiness: Readiness | None = None
    evacuated_by_guard: bool = False
    probing: bool = Field(default=False, description="back at the probe share, judged against its peers")
    set_identifier: str = ""
    restore: EvacuationInput | None = Field(default=None, description="the restore of the guard's evacuation")
    standing: str = Field(default="", description="a standing difference: worse than its peers, as it always is")
    evacuations: list[EvacuationRecord] = Field(default_factory=list, description="the guard's latest evacuations")


class Proposal(BaseModel):
    """An evacuation or restore the guard wants and a person must approve."""

    region: str
    action: Literal["evacuate", "restore"]
    reasons: list[str]
    since: datetime
    look: int


class Decision(BaseModel):
    """One decision of the guard: what, about which region, why, and what came of it."""

    at: datetime
    look: int
    region: str
    action: Literal["evacuate", "propose", "refuse", "restore", "propose_restore", "probe", "evacuated", "restored",
                    "failed"]
    reasons: list[str]


class GuardState(ControlledState[GuardStatus]):
    """The guard's whole state: the `status` query's answer, carried across continue-as-new."""

    TERMINAL = GUARD_TERMINAL
    workflow_id: str
    service: str
    environment: EnvKind = "prod"
    phase: GuardPhase = "watching"
    holds: list[Hold] = Field(default_factory=list)
    doing: str | None = None
    reason: str = ""
    look: int = 0
    runs: int = Field(default=1, description="this run's number (continue-as-new starts another)")
    weights: dict[str, int] = Field(default_factory=dict, description="by region, at the last look")
    regions: dict[str, RegionWatch] = Field(default_factory=dict)
    last_auto_evacuation: datetime | None = None
    proposals: list[Proposal] = Field(default_factory=list)
    approvals: list[ApproveGuard] = Field(default_factory=list, description="approved, not yet carried out")
    decisions: list[Decision] = Field(default_factory=list)
    audit: list[AuditEntry] = Field(default_factory=list)
    last_look_at: datetime | None = None
    notes: list[str] = Field(default_factory=list)
    incident: list[str] = Field(default_factory=list, description="regions worse than their own history at once")
    suspect: list[str] = Field(default_factory=list, description="regions possibly worse than their own history")
    unsure: list[str] = Field(default_factory=list,
                              description="regions serving too few requests to show a rise against their own history")

    def evacuated(self) -> set[str]:
        return {r for r, w in self.regions.items() if not w.serving}

    def serving(self) -> set[str]:
        return {r for r, w in self.regions.items() if w.serving}

    def proposal(self, region: str) -> Proposal | None:
        return next((p for p in self.proposals if p.region == region), None)

    def trimmed(self) -> GuardState:
        """The state a continue-as-new carries: the audit and decisions cut to their latest entries."""
        return self.model_copy(update={"audit": self.audit[-MAX_AUDIT:], "decisions": self.decisions[-MAX_DECISIONS:],
                                       "runs": self.runs + 1})


class ApproveGuard(Payload):
    """{"region": "eu-west-1", "approver": "alice", "comment": "go"} — carry out the guard's proposal for a region."""

    region: str = Field(min_length=1, max_length=63)
    approver: Identity
    comment: str = Field(default="", max_length=2000)


class DismissGuard(Payload):
    """{"region": "eu-west-1", "by": "alice", "reason": "known, being fixed"} — drop a proposal."""

    region: str = Field(min_length=1, max_length=63)
    by: Identity
    reason: str = Field(min_length=1, max_length=2000)


class StopGuard(Payload):
    """{"by": "alice", "reason": "maintenance"} — stop watching; traffic stays where it is."""

    by: Identity
    reason: str = Field(min_length=1, max_length=2000)


GuardState.model_rebuild()
GuardInput.model_rebuild()
