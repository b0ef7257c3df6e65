"""What the revert workflow takes, reports and returns.

- `RevertInput`: put a service back on an earlier version everywhere a finished release changed it (a JSON object in
  the UI's Start Workflow: strict, bounded, unknown fields refused, each problem naming its field).
- `RevertState`: the `status` query's answer and the workflow's result (or its failure's details): the release
  undone, each region's versions, health verdict and traffic, and the audit trail.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from common.text import Identity
from common.traffic.models import MAX_SERVICE_LEN, HealthInterval
from common.types import EnvKind, StageKey, StageRef, stage_key
from common.vocabulary import REVERT_TERMINAL, RevertPhase, RevertStatus
from common.vocabulary import RevertRegionStatus as RegionStatus
from workflows.controls import AuditEntry, Hold
from workflows.controls.state import ControlledState
from workflows.evacuation.models import HealthValue
from workflows.request import MAX_TEXT

VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+-]*$"  # as a request's version (workflows/request/model.py)



def revert_id(service: str, version: str) -> str:
    """One revert of a service to a version at a time: `revert/<service>/<version>`."""
    return f"revert/{service}/{version}"


class RevertInput(BaseModel):
    """Put `service` back on `to_version` in every region the release changed, in reverse wave order.

    `release` names the rollout to undo (default: the service's latest finished rollout, read once the service
    lock is ours). Strict: `"evacuate": "yes"` or `"health_minutes": "5"` is refused, never coerced."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, str_strip_whitespace=True)

    service: str = Field(min_length=1, max_length=MAX_SERVICE_LEN, pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
    to_version: str = Field(min_length=1, max_length=128, pattern=VERSION_PATTERN,
                            description="a version the service ran before the release: one it replaced, or one an "
                                        "earlier rollout of the service succeeded with")
    requested_by: Identity
    reason: str = Field(min_length=1, max_length=MAX_TEXT, description="why (the audit trail, the UI, notices)")
    release: str | None = Field(default=None, min_length=1, max_length=1000,
                                description="the rollout id to undo; default: the latest finished rollout of the service")
    stages: list[StageKey] = Field(default_factory=list, max_length=128,
                                   description="only these stages of the release (region/env); default: all of them")
    evacuate: bool = Field(default=False, description="move each production region's traffic away first, back after")
    on_conflict: Literal["reject", "queue"] = Field(
        default="reject", description="while a rollout of the service runs: refuse (naming it), or wait for it to end")
    image: str | None = Field(default=None, min_length=1, max_length=512,
                              description="the image of to_version, for deployers that keep no template of it")
    health_minutes: float | None = Field(default=None, ge=1 / 60, le=60,
                                         description="each region's health window; default: the release's "
                                                     "evacuation.health_check_minutes")
    health_interval_seconds: HealthInterval | None = Field(default=None, description="sample spacing; default: the release's evacuation settings")

    @property
    def workflow_id(self) -> str:
        return revert_id(self.service, self.to_version)


class RevertRegion(BaseModel):
    """One stage of the release being put back: where, which versions, how its health looked."""

    region: str
    environment: EnvKind
    wave: int = Field(description="its wave in the release; the revert goes from the last wave to the first")
    status: RegionStatus = "pending"
    version_before: str | None = Field(default=None, description="what it ran when the revert read it")
    version_now: str | None = None
    health: str = Field(default="", description="the health verdict against its own window before the revert")
    values: list[HealthValue] = Field(default_factory=list, description="the health look's means and n, per metric")
    no_data: bool = Field(default=False, description="the look compared nothing: no verdict, never counted healthy")
    traffic: str = Field(default="", description="the evacuation and restore, when asked for")
    started_at: datetime | None = None
    deployed_at: datetime | None = None
    ended_at: datetime | None = None

    @property
    def key(self) -> str:
        return stage_key(self.region, self.environment)

    def ref(self, service: str) -> StageRef:
        return StageRef(service=service, region=self.region, environment=self.environment)


class RevertState(ControlledState[RevertStatus]):
    """The whole revert; also its result."""

    TERMINAL = REVERT_TERMINAL
    revert_id: str
    service: str
    to_version: str
    requested_by: str
    request_reason: str = ""
    evacuate: bool = False
    on_conflict: str = "reject"
    release: str | None = Field(default=None, description="the rollout undone")
    release_version: str | None = Field(default=None, description="the version it rolled out")
    known_versions: list[str] = Field(default_factory=list, description="versions the revert could go back to")
    phase: RevertPhase = "planning"
    holds: list[Hold] = Field(default_factory=list, description="what keeps it from going on: a pause, the service lock")
    doing: str | None = None
    reason: str = Field(default="", description="why it ended, or where it is")
    regions: list[RevertRegion] = Field(default_factory=list, description="in the order they are reverted")
    current: list[str] = Field(default_factory=list, description="the stages being reverted now")
    audit: list[AuditEntry] = Field(default_factory=list)
    started_at: datetime | None = None
    ended_at: datetime | None = None

    def row(self, key: str) -> RevertRegion | None:
        return next((r for r in self.regions if r.key == key), None)


def starting_state(inp: RevertInput, revert_id: str) -> RevertState:
    """A revert's state before it has read its release: the workflow's first, and what `bifrost revert` starts the
    run's search attributes from (workflows/revert/details.py)."""
    return RevertState(revert_id=revert_id, service=inp.service, to_version=inp.to_version, requested_by=inp.requested_by,
                       request_reason=inp.reason, evacuate=inp.evacuate, on_conflict=inp.on_conflict)


@dataclass(frozen=True)
class RevertStop:
    """Why the revert ends early: its final status and the reason."""

    status: RevertPhase
    reason: str
