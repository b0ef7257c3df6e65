"""What the rollout and stage workflows carry, report and return: one record per concept.

- `StageState`: one stage, as its own workflow reports it and as the rollout lists it.
- `RolloutState`: the whole rollout; the `status` query's answer and the workflow's result (or, when the
  rollout did not reach its goal, the details of its failure).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from canary.config import JudgeResult, MonitorResult, StagePlace
from common.traffic.arms import ArmWeights
from common.traffic.models import MAX_SERVICE_LEN
from common.types import EnvKind, StageStatus, stage_key
from workflows.controls import AuditEntry
from workflows.request import (
    MAX_SOAK_HOURS,
    MAX_WAVE,
    MAX_WHO,
    MAX_WORKFLOW_ID_BYTES,
    NAME_PATTERN,
    CanarySettings,
    EvacuationSettings,
    OnFailure,
)

# A stage's history budget: it continues as new during a soak once its history passes this many events,
# far below Temporal's warning at 10,240, so a 48 h soak at 1-minute looks stays small in every run.
STAGE_HISTORY_BUDGET = 4000


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
    analysis_looks: int = Field(default=0, description="analyses of the canary so far: more than 1 when it was extended")
    extended: str = Field(default="", description="why the canary analysis was last extended (empty: never)")
    report_url: str | None = None
    reason: str = ""
    soak_looks: int = 0
    soak_max_looks: int = 0
    soak_ends_at: datetime | None = None
    awaiting_verdict: bool = Field(default=False, description="finished its work; the rollout may still roll it back")
    holds: int = Field(default=0, description="how often it held on failure (on_failure: hold); the n-th hold waits "
                                              "for the rollout's n-th decision")
    canary_step: int = Field(default=0, description="canary.traffic: the step in force (1-based; 0: none yet)")
    canary_steps: int = Field(default=0, description="canary.traffic: how many steps the plan has (0: not weighted)")
    canary_weights: str = Field(default="", description="canary.traffic: the arm weights in force, as last set or read")
    withdrawn_at: datetime | None = Field(default=None, description="canary.traffic: when canary and baseline reached "
                                                                    "weight 0")
    started_at: datetime | None = None
    ended_at: datetime | None = None
    launched_at: datetime | None = Field(default=None, description="when the rollout started this stage, by the "
                                         "rollout's clock (the stage's own times are by its own)")

    @classmethod
    def of(cls, region: str, environment: EnvKind, wave: int = 0) -> StageState:
        return cls(key=stage_key(region, environment), region=region, environment=environment, wave=wave)

    @property
    def ok(self) -> bool:
        return self.status in ("succeeded", "skipped")


class SoakProgress(BaseModel):
    """Where a soak stands; carried across continue-as-new so looks and the false-alarm budget go on."""

    started_at: datetime
    ends_at: datetime
    interval: timedelta
    max_looks: int = Field(ge=1)
    looks_done: int = 0


class StageInput(BaseModel):
    """Everything a stage needs; no secrets, only names and settings.

    Strict and bounded as the request it comes from: a stage started by hand (the UI's Start Workflow) with
    values the request would refuse fails at once, naming the field."""

    model_config = ConfigDict(strict=True, allow_inf_nan=False)

    rollout_id: str = Field(min_length=1, max_length=MAX_WORKFLOW_ID_BYTES)
    service: str = Field(min_length=1, max_length=MAX_SERVICE_LEN, pattern=NAME_PATTERN)
    version: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
    image: str = Field(min_length=1, max_length=512)
    region: str = Field(min_length=1, max_length=63, pattern=NAME_PATTERN)
    environment: EnvKind
    wave: int = Field(default=0, ge=0, le=MAX_WAVE)
    canary: CanarySettings
    soak_hours: float = Field(ge=0, le=MAX_SOAK_HOURS)
    on_failure: OnFailure = "rollback"
    evacuation: EvacuationSettings = Field(default_factory=EvacuationSettings)
    requested_by: str = Field(default="bifrost", min_length=1, max_length=MAX_WHO)
    history_budget: int = Field(default=STAGE_HISTORY_BUDGET, ge=50, le=10_000)
    resume: StageResume | None = None
    place: StagePlace | None = Field(default=None, description="this stage's place in the rollout: the judge spends its "
                                     "share of rollout_alpha and may extend an inconclusive analysis (None: judge once)")


class StageConclusion(BaseModel):
    """The rollout's word to a stage that has finished its work: keep the new version, or roll it back."""

    action: Literal["keep", "roll_back"]
    reason: str = ""


HoldAction = Literal["rollback", "retry", "promote"]


class HoldDecision(BaseModel):
    """The rollout's decision on a stage held on failure: its n-th hold (`hold`), what to do, who chose and why."""

    hold: int = Field(ge=1)
    action: HoldAction
    by: str
    reason: str = ""


class StageDetail(BaseModel):
    """A stage's whole state, carried whole through continue-as-new and answered by its `progress` query: the
    stage as the rollout lists it, the judge's and the soak monitor's last findings, where its soak stands, what
    the rollout ordered it (hold, stop, skip the soak), and its audit (internal signals it ignored)."""

    state: StageState
    analysis: JudgeResult | None = None
    last_look: MonitorResult | None = None
    runs: int = 1
    audit: list[AuditEntry] = Field(default_factory=list)
    previous: str | None = Field(default=None, description="the version found before the stage changed anything")
    soak: SoakProgress | None = Field(default=None, description="where the soak stands, once promoted")
    hold: bool = Field(default=False, description="the rollout is paused: hold before promotion")
    skip_soak_reason: str | None = None
    stop_reason: str | None = None
    weights: ArmWeights | None = Field(default=None, description="canary.traffic: the arm weights in force as last "
                                       "set or read (each write expects them)")
    rollout_run: str | None = Field(default=None, description="the rollout's run that started this stage, as its own "
                                    "history shows (workflows/stage/origin.py)")


StageResume = StageDetail  # what a stage's next run takes over (StageInput.resume): the whole state


class StageOrders(BaseModel):
    """What the rollout has told its stages (its `stage_orders` query). A stage acts on the rollout's signals
    only as far as this says, since anyone may send them by hand."""

    hold: bool = Field(default=False, description="hold before promotion: the rollout is paused, or a stage is held on failure")
    stop: dict[str, str] = Field(default_factory=dict, description="stage key -> why the rollout stopped it")
    skip_soak: dict[str, str] = Field(default_factory=dict, description="stage key -> who ended its soak, and why")
    conclude: dict[str, StageConclusion] = Field(default_factory=dict, description="stage key -> the rollout's verdict")
    resolve: dict[str, HoldDecision] = Field(default_factory=dict, description="stage key -> the decision on its "
                                             "latest hold on failure (resolve_hold, or the hold's timeout)")
