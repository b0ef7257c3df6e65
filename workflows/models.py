"""Workflow inputs, results and state shared by the rollout and stage workflows."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from canary.config import JudgeResult, MonitorResult
from workflows.request import CanarySettings, EnvKind

StageStatus = Literal[
    "pending", "deploying", "analyzing", "promoting", "soaking", "succeeded",
    "rolling_back", "rolled_back", "skipped", "failed",
]
RolloutStatus = Literal[
    "planning", "queued", "running", "paused", "awaiting_approval", "waiting_window", "rolling_back",
    "succeeded", "rolled_back", "aborted", "rejected", "failed",
]
TERMINAL: frozenset[str] = frozenset({"succeeded", "rolled_back", "aborted", "rejected", "failed"})


class StageInput(BaseModel):
    """Everything a stage needs; no secrets, only names and settings."""

    rollout_id: str
    service: str
    version: str
    image: str
    region: str
    environment: EnvKind
    canary: CanarySettings
    soak_hours: float


class StageResult(BaseModel):
    """How a stage ended and which version its region runs now."""

    key: str
    status: StageStatus
    previous_version: str | None = None
    final_version: str | None = None
    reason: str = ""
    verdict: str | None = None
    score: float | None = None
    report_path: str | None = None
    soak_looks: int = 0
    started_at: datetime | None = None
    ended_at: datetime | None = None

    @property
    def ok(self) -> bool:
        return self.status in ("succeeded", "skipped")


class StagePhase(BaseModel):
    """A stage tells its rollout that it entered a new phase (for the status query and the UI)."""

    key: str
    phase: StageStatus
    detail: str = ""


class StageProgress(BaseModel):
    """What a running stage reports through its `progress` query."""

    key: str
    phase: StageStatus
    detail: str = ""
    analysis: JudgeResult | None = None
    report_path: str | None = None
    last_look: MonitorResult | None = None
    soak_ends_at: datetime | None = None


class AuditEntry(BaseModel):
    """One action on a rollout: who, what, when (workflow time) and why."""

    at: datetime
    who: str
    action: str
    target: str | None = None
    detail: str = ""


class StageState(BaseModel):
    """Per-stage view in the rollout's status query."""

    key: str
    region: str
    environment: EnvKind
    wave: int
    status: StageStatus = "pending"
    version_before: str | None = None
    version_now: str | None = None
    verdict: str | None = None
    score: float | None = None
    report_path: str | None = None
    reason: str = ""
    soak_looks: int = 0
    started_at: datetime | None = None
    ended_at: datetime | None = None


class RolloutState(BaseModel):
    """The whole rollout: plan, per-stage state and versions, approvals, audit trail."""

    rollout_id: str
    service: str
    version: str
    status: RolloutStatus = "planning"
    current_wave: int | None = None
    current_stage: str | None = None
    waiting_for: str | None = None
    stages: list[StageState] = Field(default_factory=list)
    pending_approvals: list[str] = Field(default_factory=list)
    approved: list[str] = Field(default_factory=list)
    audit: list[AuditEntry] = Field(default_factory=list)
    reason: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None

    def stage(self, key: str) -> StageState | None:
        return next((s for s in self.stages if s.key == key), None)


class RolloutResult(BaseModel):
    """The final word on a rollout: status, reason and every stage's version."""

    rollout_id: str
    service: str
    version: str
    status: RolloutStatus
    reason: str = ""
    stages: list[StageState]
    audit: list[AuditEntry] = Field(default_factory=list)
    started_at: datetime | None = None
    ended_at: datetime | None = None

    @property
    def region_versions(self) -> dict[str, str | None]:
        return {s.key: s.version_now for s in self.stages}
