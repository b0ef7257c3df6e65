"""The region guard's rules: whether a sick region may be evacuated now, only proposed, or must be refused.

Pure functions of the state the guard holds (no I/O, no clock: `now` is given), so the workflow, the CLI and the
property tests run the same rules. Hard limits refuse (and say why): never the last serving region, at most
`max_evacuated` regions evacuated at once, and receivers that cannot take the load. Soft limits turn an
automatic evacuation into a proposal a person approves: `mode: propose`, a quiet window, and the minimum gap
since the last automatic evacuation.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from workflows.request import DeployWindow, Region, TimeZone
from workflows.windows import is_open

GuardMode = Literal["auto", "propose"]
Action = Literal["evacuate", "propose", "refuse"]


class GuardRules(BaseModel):
    """What the guard may do on its own; every field is input (docs/traffic.md#the-region-guard)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    mode: GuardMode = Field(default="propose", description="auto: evacuate by itself; propose: wait for approval")
    restore: GuardMode = Field(default="auto", description="auto: restore after the hold-down; propose: wait for approval")
    max_evacuated: int = Field(default=1, ge=1, le=50, description="M: at most this many regions evacuated at once")
    min_gap_minutes: float = Field(default=60, ge=0, le=7 * 24 * 60,
                                   description="between two automatic evacuations; inside it the guard only proposes")
    quiet_windows: list[DeployWindow] = Field(default_factory=list, max_length=50,
                                              description="weekly windows in which the guard only proposes")
    timezone: TimeZone = Field(default="UTC", description="IANA zone of the quiet windows")

    def quiet(self, at: datetime) -> bool:
        """Whether `at` falls inside a quiet window."""
        return bool(self.quiet_windows) and is_open(
            Region(name="quiet", timezone=self.timezone, windows=self.quiet_windows), at)


class Readiness(BaseModel):
    """Whether the other regions can absorb a region's traffic now (the evacuation's own read-only plan)."""

    region: str
    ready: bool
    problems: list[str] = Field(default_factory=list)
    receivers: dict[str, str] = Field(default_factory=dict, description="receiver -> replicas now → after pre-warm")
    checked_at: datetime | None = None


class Verdict(BaseModel):
    """What the rules allow for one sick region: evacuate now, propose (wait for approval), or refuse; and why."""

    action: Action
    reasons: list[str]


def evacuation_verdict(rules: GuardRules, region: str, *, serving: set[str], evacuated: set[str],
                       readiness: Readiness | None, last_auto: datetime | None, now: datetime) -> Verdict:
    """Apply the rules to one sick region. `serving`: regions with traffic now; `evacuated`: regions drained now."""
    refuse = []
    if region not in serving:
        refuse.append(f"{region} serves no traffic: nothing to evacuate")
    elif serving <= {region}:
        refuse.append(f"{region} is the last serving region; the guard never evacuates it")
    if len(evacuated - {region}) >= rules.max_evacuated:
        refuse.append(f"{len(evacuated - {region})} region(s) already evacuated ({', '.join(sorted(evacuated))}); "
                      f"max_evacuated is {rules.max_evacuated}")
    if readiness is None:
        refuse.append(f"the receivers' readiness for {region} is not known yet")
    elif not readiness.ready:
        refuse.append(f"the receivers cannot take {region}'s load: " + "; ".join(readiness.problems))
    if refuse:
        return Verdict(action="refuse", reasons=refuse)
    soft = []
    if rules.mode == "propose":
        soft.append("mode is propose")
    if rules.quiet(now):
        soft.append(f"inside a quiet window ({rules.timezone})")
    gap = timedelta(minutes=rules.min_gap_minutes)
    if last_auto is not None and now - last_auto < gap:
        soft.append(f"the last automatic evacuation was {_ago(now - last_auto)} ago; the minimum gap is "
                    f"{rules.min_gap_minutes:g} min")
    if soft:
        return Verdict(action="propose", reasons=soft)
    return Verdict(action="evacuate", reasons=["all rules allow it"])


def _ago(d: timedelta) -> str:
    s = int(d.total_seconds())
    return f"{s // 60} min {s % 60} s" if s >= 60 else f"{s} s"
