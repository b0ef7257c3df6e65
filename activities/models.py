"""Activity inputs and outputs: single pydantic arguments, safe to evolve by adding fields."""

from __future__ import annotations

from pydantic import BaseModel, Field

from canary.config import JudgeConfig, JudgeResult, MetricSpec, MonitorResult
from common.types import MetricWindow, Role, StageRef


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
