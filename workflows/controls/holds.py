"""Holds: what keeps a workflow from going on, and the status word and wait they make of its phase.

The words (hold reasons, the status each shows, their precedence) are in common/vocabulary.py."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from pydantic import BaseModel, Field

from common.vocabulary import HOLD_PRECEDENCE, HOLD_STATUS, HoldReason


class Hold(BaseModel):
    """One thing that keeps a workflow from going on: why (typed), since when, who placed it, what releases it."""

    reason: HoldReason
    since: datetime
    by: str = Field(description="who placed it: a person (pause) or 'bifrost' (lock, approval, window, failure)")
    why: str = Field(default="", description="the person's reason, as typed (escaped where shown)")
    releases: str = Field(description="what releases it, e.g. 'resume', 'approval of wave 4 (gates: ...)'")
    at: str = Field(default="", description="where it holds, e.g. 'before wave 3' (empty: where the workflow is)")
    targets: list[str] = Field(default_factory=list, description="what it holds back: stage keys or regions")
    in_force: bool = Field(default=True, description="false: asked for, takes hold at the next safe point")
    wave: int | None = Field(default=None, description="an approval: the wave it holds back (rollouts)")
    gates: list[str] = Field(default_factory=list, description="an approval: the gates still to approve")
    until: datetime | None = Field(default=None, description="when it ends on its own if nobody decides (a timeout)")
    then: str = Field(default="", description="what happens at `until`, e.g. 'the rollout is rejected and rolls back'")
    deciders: str = Field(default="", description="who may decide, as shown: names (escaped where shown), or anyone")

    @property
    def waiting_for(self) -> str:
        """One line: what the workflow waits for while this hold holds it, who may decide, and when it times out
        (in UTC, never relative: the line is published once and read later)."""
        parts = [f"{self.releases} (held {self.at})" if self.at else self.releases]
        if self.deciders:
            parts.append(f"may decide: {self.deciders}")
        if self.until is not None:
            at = self.until.astimezone(UTC) if self.until.tzinfo else self.until
            parts.append(f"times out at {at:%Y-%m-%d %H:%M:%S} UTC" + (f", then {self.then}" if self.then else ""))
        return "; ".join(parts)


def status_of(phase: str, holds: Sequence[Hold], terminal: frozenset[str]) -> str:
    """The one status word of a workflow: its phase, or, while it works and a hold is in force, that hold's word."""
    if phase in terminal:
        return phase
    held = {h.reason for h in holds if h.in_force}
    for reason in HOLD_PRECEDENCE:
        if reason in held:
            return HOLD_STATUS[reason]
    return phase


def waiting_for(holds: Sequence[Hold], doing: str | None = None) -> str | None:
    """What the workflow waits for: the hold in force (by precedence), else what it is doing now."""
    held: dict[str, Hold] = {}
    for h in holds:
        if h.in_force:
            held.setdefault(h.reason, h)
    for reason in HOLD_PRECEDENCE:
        if reason in held:
            return held[reason].waiting_for
    return doing


def find_hold(holds: Sequence[Hold], reason: HoldReason) -> Hold | None:
    """The hold of this reason, if one is placed (in force or asked for)."""
    return next((h for h in holds if h.reason == reason), None)
