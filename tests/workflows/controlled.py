"""The smallest controlled workflow state, for tests of the controls themselves."""

from __future__ import annotations

from pydantic import Field

from common.types import TERMINAL
from workflows.controls import AuditEntry, ControlledState, Hold


class ControlledStub(ControlledState[str]):
    """A state with what `Controls` needs (phase, holds, audit, doing) and the rollout's terminal phases."""

    TERMINAL = TERMINAL
    phase: str = "running"
    holds: list[Hold] = Field(default_factory=list)
    audit: list[AuditEntry] = Field(default_factory=list)
    doing: str | None = None
