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
    """Make `version` the primary; the deployer records what it replaced. With `cleanup`, then remove canary
    and baseline in the same activity (a stage without a soak needs them no longer)."""

    stage: StageRef
    version: str
    image: str
    cleanup: bool = False


class PromoteResult(BaseModel):
    """The version the promotion replaced, and why canary and baseline could not be removed (if they could not)."""

    previous_version: str | None
    cleanup_error: str | None = None


class RollbackInput(BaseModel):
    """Put the primary back on `to_version` (no-op if it already runs it) and remove canary and baseline."""

    stage: StageRef
    to_version: str | None
    image: str | None = None
    reason: str = ""


class RollbackResult(BaseModel):
    """The primary is back on the version asked for; `cleanup_error` says why canary and baseline remain."""

    cleanup_error: str | None = None


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
