"""Activity inputs and outputs: single pydantic arguments, safe to evolve by adding fields."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from canary.config import JudgeConfig, JudgeResult, MetricSpec, MonitorResult

Role = Literal["primary", "canary", "baseline"]


class StageRef(BaseModel):
    """Which service, region and environment an activity acts on."""

    service: str
    region: str
    environment: Literal["test", "prod"]

    @property
    def key(self) -> str:
        return f"{self.region}/{self.environment}"


class DeployInput(BaseModel):
    """Run `version` as the canary or baseline beside the primary."""

    stage: StageRef
    version: str
    image: str | None = None  # None for a baseline: copy the primary's current image
    replicas: int = 1


class PromoteInput(BaseModel):
    """Make `version` the primary; the deployer records what it replaced."""

    stage: StageRef
    version: str
    image: str


class PromoteResult(BaseModel):
    previous_version: str | None


class RollbackInput(BaseModel):
    """Put the primary back on `to_version` (no-op if it already runs it) and remove canary and baseline."""

    stage: StageRef
    to_version: str | None
    image: str | None = None
    reason: str = ""


class StageOnly(BaseModel):
    stage: StageRef


class MetricWindow(BaseModel):
    """A time window sampled once per `interval_seconds`."""

    start: datetime
    end: datetime
    interval_seconds: int = 60


class AnalysisInput(BaseModel):
    """Fetch each metric for baseline and canary over the window, then judge."""

    stage: StageRef
    rollout_id: str
    analysis_id: str
    metrics: list[MetricSpec]
    judge: JudgeConfig
    window: MetricWindow
    baseline_version: str | None
    canary_version: str
    canary_role: Role = "canary"


class AnalysisResult(BaseModel):
    """The judge's verdict plus where its report was written."""

    result: JudgeResult
    report_path: str | None = None


class SoakCheckInput(BaseModel):
    """One look of the soak monitor over the soak so far."""

    stage: StageRef
    rollout_id: str
    metrics: list[MetricSpec]
    judge: JudgeConfig
    window: MetricWindow
    baseline_version: str | None
    canary_version: str
    look: int = Field(ge=1)
    max_looks: int = Field(ge=1)


class SoakCheckResult(BaseModel):
    monitor: MonitorResult


class Notification(BaseModel):
    """A rollout or stage event for humans (chat webhooks); never fails a rollout."""

    rollout_id: str
    service: str
    version: str
    event: str
    text: str
    stage: str | None = None
