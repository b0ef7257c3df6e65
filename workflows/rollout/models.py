"""What the rollout carries, reports and returns: `RolloutState` (the `status` query's answer and the
workflow's result), its one-line summary, and `Stop` (why it stops early)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, Field, computed_field

from common.types import TERMINAL, RollbackScope, RolloutStatus
from common.vocabulary import RolloutPhase
from workflows.controls import AuditEntry, Hold, find_hold
from workflows.controls.state import ControlledState
from workflows.stage.models import StageState


@dataclass(frozen=True)
class Stop:
    """Why the rollout must stop early: the final status, the reason, and a rollback scope if one was chosen."""

    status: RolloutPhase
    reason: str
    scope: RollbackScope | None = None


class RolloutState(ControlledState[RolloutStatus]):
    """The whole rollout: per-stage state and versions, approvals, audit trail; also its final result."""

    TERMINAL = TERMINAL
    rollout_id: str
    service: str
    version: str
    phase: RolloutPhase = "planning"
    holds: list[Hold] = Field(default_factory=list, description="what keeps the rollout from going on: the service "
                              "lock, an approval, a deployment window, a pause (workflows/controls/)")
    doing: str | None = Field(default=None, description="what it works on now, when no hold holds it")
    waves: int = 0
    current_wave: int | None = None
    current_stages: list[str] = Field(default_factory=list, description="the stages the rollout works on now")
    stages: list[StageState] = Field(default_factory=list)
    approved: list[str] = Field(default_factory=list)
    failed_stage: str | None = Field(default=None, description="the first stage that failed on its own: the rollout "
                                     "goes no further and rolls back by its scope")
    window_overrides: list[str] = Field(default_factory=list, description="stages a release manager let start "
                                        "outside their deployment window (override_window)")
    audit: list[AuditEntry] = Field(default_factory=list)
    reason: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None

    def stage(self, key: str) -> StageState | None:
        return next((s for s in self.stages if s.key == key), None)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def awaiting_wave(self) -> int | None:
        """The wave whose approval the rollout waits for (its approval hold)."""
        h = find_hold(self.holds, "approval")
        return h.wave if h is not None else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def pending_approvals(self) -> list[str]:
        """The gates still to approve (its approval hold)."""
        h = find_hold(self.holds, "approval")
        return list(h.gates) if h is not None else []

    @property
    def pause(self) -> Hold | None:
        """The pause, from when it is asked for (in force at the next safe point)."""
        return find_hold(self.holds, "paused")

    def wave_stages(self, wave: int) -> list[StageState]:
        return [s for s in self.stages if s.wave == wave]

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL

    @property
    def region_versions(self) -> dict[str, str | None]:
        return {s.key: s.version_now for s in self.stages}


class RolloutSummary(BaseModel):
    """The `summary` query: the rollout at a glance, one line per field."""

    rollout: str
    status: RolloutStatus
    wave: str
    stages: dict[str, str]
    waiting_for: str | None = None
    reason: str = ""


def lock_releases(service: str) -> str:
    """What releases a rollout's `lock` hold (queued behind another rollout of the service)."""
    return f"the {service} lock (another version may be rolling out)"


def submitted(rollout_id: str, service: str, version: str, *, at: datetime) -> RolloutState:
    """The state a rollout is submitted in, queued for its service's lock: what the CLI publishes when it starts
    one, before the workflow's own first publication."""
    lock = Hold(reason="lock", since=at, by="bifrost", releases=lock_releases(service))
    return RolloutState(rollout_id=rollout_id, service=service, version=version, phase="running", holds=[lock])
