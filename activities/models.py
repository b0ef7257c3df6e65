"""Activity inputs and outputs: single pydantic arguments, safe to evolve by adding fields."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from canary.config import Decision, JudgeConfig, JudgeResult, MetricSpec, MonitorResult, StagePlace
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
    """Fetch each metric for baseline and canary over the window, then judge.

    Strict and bounded (ReportWorkflow takes a ReportInput, which anyone may start from the UI)."""

    model_config = ConfigDict(strict=True, allow_inf_nan=False)

    stage: StageRef
    rollout_id: str = Field(min_length=1, max_length=1000)
    analysis_id: str = Field(min_length=1, max_length=200)
    metrics: list[MetricSpec] = Field(max_length=50)
    judge: JudgeConfig
    window: MetricWindow
    baseline_version: str | None
    canary_version: str
    canary_role: Role = "canary"
    place: StagePlace | None = Field(default=None, description="the stage's place in its rollout; None: judge once at alpha")
    look: int = Field(default=1, ge=1, description="1 for the first window, 2 after one extension, ...")


class AnalysisResult(BaseModel):
    """The judge's verdict plus the URL its report will be stored at (the `render_report` activity stores it)."""

    result: JudgeResult
    report_url: str | None = Field(default=None, description="where the report opens once render_report has run")
    decision: Decision | None = Field(default=None, description="pass, fail or extend (canary.sequential.decide)")


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
    place: StagePlace | None = Field(default=None, description="the stage's place: the soak spends its share of rollout_alpha")
    analysis_id: str | None = Field(default=None, description="names this look's report; default: <region>-<env>-soak-<look>")

    def report_id(self) -> str:
        """The analysis id this look's report is stored under."""
        return self.analysis_id or f"{self.stage.region}-{self.stage.environment}-soak-{self.look}"


class SoakCheckResult(BaseModel):
    monitor: MonitorResult
    report_url: str | None = Field(default=None, description="set when the look alarms: where its report will open")


class ReportInput(AnalysisInput):
    """Render and store the report of one analysis or soak look: the analysis's own input plus what was acted on.

    Carries the window, never the samples: the activity fetches them again (fetching is idempotent), so
    sample arrays stay out of Temporal's history. Build it with `for_canary` or `for_soak_look`."""

    result: JudgeResult | None = Field(
        default=None, description="the canary verdict acted on; None: judge the re-fetched samples again")
    monitor: MonitorResult | None = Field(default=None, description="for a soak look: the look acted on")
    baseline_window: MetricWindow | None = Field(
        default=None, description="a traffic health look: the primary's window before the shift (baseline_version), "
                                  "drawn against `window` (canary_version); None: baseline and canary over `window`")

    @classmethod
    def for_canary(cls, analysis: AnalysisInput, result: JudgeResult | None = None) -> "ReportInput":
        """The report of `analyze_canary(analysis)`; pass its result so the page shows the verdict acted on."""
        return cls(**analysis.model_dump(), result=result)

    @classmethod
    def for_soak_look(cls, check: SoakCheckInput, monitor: MonitorResult) -> "ReportInput":
        """The report of one `soak_check(check)` look: the promoted primary against the baseline."""
        return cls(
            stage=check.stage, rollout_id=check.rollout_id, analysis_id=check.report_id(), metrics=check.metrics,
            judge=check.judge, window=check.window, baseline_version=check.baseline_version,
            canary_version=check.canary_version, canary_role="primary", monitor=monitor,
        )


class ReportRef(BaseModel):
    """Where a stored report opens, and its size."""

    url: str
    key: str
    size_bytes: int
