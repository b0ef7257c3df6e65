"""Payloads of the release-manager updates. Each is one JSON object, as the Temporal UI sends it.

A payload that does not match its model is refused before the validator runs, naming the field
(worker/converter.py); the validators then check it against the rollout's state.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from common.types import RollbackScope, StageKey
from workflows.controls import Ack, Name, Pause, Payload, Resume, refused

__all__ = ["Abort", "Ack", "Approve", "OverrideWindow", "Pause", "Payload", "Reject", "ResolveHold", "Resume",
           "Rollback", "SkipSoak", "refused"]

Why = Annotated[str, Field(min_length=1, max_length=2000, description="why (recorded in the audit trail)")]


class _Gate(Payload):
    stage: StageKey | None = None
    wave: int | None = Field(default=None, ge=1, le=1000)

    @model_validator(mode="after")
    def _one_target(self) -> _Gate:
        if (self.stage is None) == (self.wave is None):
            raise ValueError('give exactly one of "stage" (e.g. "eu-west-1/prod") or "wave" (e.g. 4)')
        return self


class Approve(_Gate):
    """{"wave": 4, "approver": "alice", "comment": "metrics look fine"} — or a stage of that wave instead of "wave"."""

    approver: Name
    comment: str = Field(default="", max_length=2000)


class Reject(_Gate):
    """{"wave": 4, "approver": "alice", "reason": "..."} — rolls back by the rollback scope."""

    approver: Name
    reason: Why


class Abort(Payload):
    """{"by": "alice", "reason": "..."} — stops and rolls back by the rollback scope."""

    by: Name
    reason: Why


class Rollback(Payload):
    """{"by": "alice", "reason": "...", "scope": "all"} — stops and rolls back with an explicit scope."""

    by: Name
    reason: Why
    scope: RollbackScope | None = None


class SkipSoak(Payload):
    """{"stage": "us-east-1/prod", "by": "alice", "reason": "..."}"""

    stage: StageKey
    by: Name
    reason: Why


class OverrideWindow(Payload):
    """{"stage": "eu-west-1/prod", "by": "alice", "reason": "..."}"""

    stage: StageKey
    by: Name
    reason: Why


class ResolveHold(Payload):
    """{"stage": "eu-west-1/prod", "action": "retry", "by": "alice", "reason": "..."} — decide on a stage held on
    failure: `retry` (judge again on a fresh window), `promote` (a reason is required) or `rollback` (a reason is
    required; the rollout then rolls back by its rollback scope)."""

    stage: StageKey
    action: Literal["rollback", "retry", "promote"]
    by: Name
    reason: str = Field(default="", max_length=2000, validate_default=True,
                        description="why (required for promote and rollback)")

    @field_validator("reason")
    @classmethod
    def _reason_when_it_matters(cls, v: str, info: ValidationInfo) -> str:
        action = info.data.get("action")
        if action in ("promote", "rollback") and not v:
            raise ValueError(f"required to {action} a held stage; say why (it goes to the audit trail)")
        return v
