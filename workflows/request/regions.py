"""Where a rollout goes: the regions, their environments, deploy windows and share of traffic, and what a
failing stage of a region does (roll back, evacuate, hold)."""

from __future__ import annotations

from datetime import date, datetime, time
from typing import Literal

from pydantic import Field, field_validator, model_validator

from common.problems import show
from common.traffic.models import HealthInterval
from common.traffic.plan import step_problems
from common.traffic.settings import HealthCheckMinutes, TrafficChangeSettings
from common.types import ENV_KINDS, EnvKind
from workflows.request.bounds import MIN_WINDOW, NAME_PATTERN, WEEKDAYS, RequestModel, Weekday
from workflows.request.values import CLOCK, IsoDate, TimeZone


class DeployWindow(RequestModel):
    """A weekly window in which a region may start a stage, in the region's IANA time zone."""

    days: list[Weekday] = Field(default_factory=lambda: list(WEEKDAYS), min_length=1, max_length=7)
    start: time = time(9, 0)
    end: time = time(17, 0)

    @field_validator("start", "end", mode="before")
    @classmethod
    def _local_clock(cls, v: object) -> object:
        """"HH:MM" (or "HH:MM:SS", as the request travels) in the region's time zone; nothing else."""
        if isinstance(v, time):
            if v.tzinfo is not None:
                raise ValueError(f"give a local time without a zone (got {v.isoformat()}); the region's timezone applies")
            return v
        if isinstance(v, bool) or isinstance(v, int | float):
            hint = ""
            if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 24 * 60:
                hint = f'; did you mean "{v // 60:02d}:{v % 60:02d}"? YAML reads an unquoted 9:00 as a number: quote it'
            raise ValueError(f'expected a local time "HH:MM" as a string, got the number {show(v)}{hint}')
        if isinstance(v, str):
            m = CLOCK.fullmatch(v)
            if m is None:
                raise ValueError(f'expected a local time "HH:MM" from 00:00 to 23:59, without a zone (got {show(v)})')
            frac = (m.group(4) or "").ljust(6, "0")
            return time(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0), int(frac or 0))
        raise ValueError(f'expected a local time "HH:MM", got {type(v).__name__}')

    @model_validator(mode="after")
    def _start_before_end(self) -> "DeployWindow":
        if self.start >= self.end:
            raise ValueError(f"start ({self.start}) must be before end ({self.end}); windows do not cross midnight")
        length = datetime.combine(date.min, self.end) - datetime.combine(date.min, self.start)
        if length < MIN_WINDOW:
            raise ValueError(f"the window {self.start}-{self.end} is open for {length.total_seconds():g} s; a window "
                             f"must be open at least {MIN_WINDOW.total_seconds():g} s for a stage to start inside it")
        return self


OnFailure = Literal["rollback", "evacuate", "hold", "evacuate_and_hold"]
EVACUATES: frozenset[str] = frozenset({"evacuate", "evacuate_and_hold"})  # on_failure values that move traffic first
HOLDS: frozenset[str] = frozenset({"hold", "evacuate_and_hold"})  # on_failure values that hold for a person
MAX_HOLD_MINUTES = 14 * 24 * 60


class Region(RequestModel):
    """One region, the environments Bifrost deploys there, and its share of production traffic."""

    name: str = Field(pattern=NAME_PATTERN, max_length=63, description="region name, e.g. us-east-1")
    environments: list[EnvKind] = Field(default_factory=lambda: list(ENV_KINDS), min_length=1)
    traffic_share: float = Field(default=0.0, ge=0.0, le=1.0, description="fraction of production traffic")
    timezone: TimeZone = "UTC"
    windows: list[DeployWindow] = Field(default_factory=list, max_length=50, description="empty: any time")
    freeze_dates: list[IsoDate] = Field(default_factory=list, max_length=1000)
    on_failure: OnFailure = Field(
        default="rollback",
        description="when a stage of the region fails: roll it back; evacuate its traffic first, roll back, then "
                    "restore the traffic (see `evacuation`); hold with canary and baseline running until a release "
                    "manager retries, promotes or rolls back (see `hold`); or evacuate_and_hold: move a failing prod "
                    "stage's traffic away, then hold")

    @field_validator("environments")
    @classmethod
    def _unique_envs(cls, v: list[EnvKind]) -> list[EnvKind]:
        if len(set(v)) != len(v):
            raise ValueError(f"environments must not repeat (got {v})")
        # test always precedes prod regardless of how they are written
        return sorted(v, key=lambda e: 0 if e == "test" else 1)


class HoldSettings(RequestModel):
    """How long a stage held on failure (`on_failure: hold`) waits for a release manager, and what happens then."""

    timeout_minutes: float = Field(default=24 * 60.0, ge=1 / 60, le=MAX_HOLD_MINUTES,
                                   description="how long a hold waits for resolve_hold (1 s to 14 days)")
    on_timeout: Literal["rollback", "promote"] = Field(
        default="rollback", description="what a hold that times out does: roll the stage back, or promote it")


class EvacuationSettings(TrafficChangeSettings):
    """How a failing production stage with `on_failure: evacuate` moves its region's traffic away and back: the
    one model of a traffic change's settings, with a production stage's defaults (samples a minute apart, a
    five-minute watch), its steps checked when the file loads."""

    health_check_minutes: HealthCheckMinutes = 5.0
    health_interval_seconds: HealthInterval = Field(
        default=60, description="sample spacing of the health checks; a step waits for min_samples")

    @field_validator("steps")
    @classmethod
    def _steps(cls, v: list[int]) -> list[int]:
        problems = step_problems(v)
        if problems:
            raise ValueError("; ".join(p.removeprefix("steps: ") for p in problems))
        return v
