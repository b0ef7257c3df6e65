"""What the rollout and stage workflows carry, report and return: one record per concept.

- `StageState`: one stage, as its own workflow reports it and as the rollout lists it.
- `RolloutState`: the whole rollout; the `status` query's answer and the workflow's result.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from canary.config import JudgeResult, MonitorResult
from common.types import TERMINAL, EnvKind, RolloutStatus, StageStatus, stage_key
from workflows.request import CanarySettings


class StageInput(BaseModel):
    """Everything a stage needs; no secrets, only names and settings."""

    rollout_id: str
    service: str
    version: str
    image: str
    region: str
    environment: EnvKind
    wave: int = 0
    canary: CanarySettings
    soak_hours: float


class StageState(BaseModel):
    """One stage: its status, the version before and now, its verdict and soak, and why it ended as it did."""

    key: str
    region: str
    environment: EnvKind
    wave: int = 0
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

    @classmethod
    def of(cls, region: str, environment: EnvKind, wave: int = 0) -> "StageState":
        return cls(key=stage_key(region, environment), region=region, environment=environment, wave=wave)

    @property
    def ok(self) -> bool:
        return self.status in ("succeeded", "skipped")


class StageDetail(BaseModel):
    """A running stage's `progress` query: its state plus the judge's and the soak monitor's last findings."""

    state: StageState
    analysis: JudgeResult | None = None
    last_look: MonitorResult | None = None
    soak_ends_at: datetime | None = None


class AuditEntry(BaseModel):
    """One action on a rollout: who, what, when (workflow time) and why."""

    at: datetime
    who: str
    action: str
    target: str | None = None
    detail: str = ""


class RolloutState(BaseModel):
    """The whole rollout: per-stage state and versions, approvals, audit trail; also its final result."""

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

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL

    @property
    def region_versions(self) -> dict[str, str | None]:
        return {s.key: s.version_now for s in self.stages}
