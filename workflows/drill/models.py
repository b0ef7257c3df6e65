"""What a drill takes and reports: `DrillInput` (one practice run over a service's regions), `RegionDrill` (what
happened to one region) and `DrillReport` (the result and the `status` query's answer)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from common.text import Identity
from common.traffic.models import MAX_SERVICE_LEN
from common.traffic.settings import lift
from common.types import EnvKind
from workflows.guard.models import GuardEvacuation, GuardRules
from workflows.request import DeployWindow, TimeZone

DrillOutcome = Literal["drilled", "skipped", "failed"]


def drill_id(service: str) -> str:
    """The schedule's id, and the prefix of the drills it starts."""
    return f"drill/{service}"


class DrillInput(BaseModel):
    """One practice run over a service's regions. Strict: the schedule's action may be edited in the UI."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    service: str = Field(min_length=1, max_length=MAX_SERVICE_LEN, pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
    environment: EnvKind = "prod"
    requested_by: Identity
    regions: list[str] = Field(min_length=1, max_length=50, description="drilled one at a time, in this order")
    blocked_windows: list[DeployWindow] = Field(default_factory=list, max_length=50,
                                                description="weekly windows in which the drill is skipped")
    timezone: TimeZone = Field(default="UTC", description="IANA zone of the blocked windows")
    hold_minutes: float = Field(default=5, ge=0, le=24 * 60, description="how long each region stays evacuated")
    evacuation: GuardEvacuation = Field(default_factory=lambda: GuardEvacuation(),
                                        description="how each region's evacuation and restore go")

    @model_validator(mode="before")
    @classmethod
    def _flat_settings(cls, data: Any) -> Any:
        """Inputs written before `evacuation` (a schedule's action) gave its settings flat: moved into it."""
        return lift(data, "evacuation", {name: name for name in ("steps", "health_interval_seconds", "min_samples")})

    def problems(self) -> list[str]:
        """What is wrong across fields, one line each naming the field (the CLI and the workflow refuse on it)."""
        problems = self.evacuation.problems("evacuation.")
        if len(set(self.regions)) != len(self.regions):
            problems.append(f"regions: each region may appear once; got {', '.join(self.regions)}")
        return problems

    def blocked(self, at: datetime) -> bool:
        return GuardRules(quiet_windows=self.blocked_windows, timezone=self.timezone).quiet(at)


class RegionDrill(BaseModel):
    """What happened to one region: evacuated and restored (and how long it took), refused, or reverted."""

    region: str
    evacuation: str = Field(default="", description="the evacuation's final status and reason")
    restore: str = ""
    drain_seconds: float | None = Field(default=None, description="from the first weight change to the last")
    receivers_health: list[str] = Field(default_factory=list, description="the health check after each step")
    refused: list[str] = Field(default_factory=list)


class DrillReport(BaseModel):
    """The drill's result (and its `status` query)."""

    service: str
    outcome: DrillOutcome | Literal["running"] = "running"
    reason: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None
    regions: list[RegionDrill] = Field(default_factory=list)
