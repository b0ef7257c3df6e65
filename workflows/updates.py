"""Payloads of the release-manager updates. Each is one JSON object, as the Temporal UI sends it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from common.types import RollbackScope


class _Payload(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Approve(_Payload):
    """{"stage": "eu-west-1/prod", "approver": "alice", "comment": "metrics look fine"} — or "wave": 3."""

    stage: str | None = None
    wave: int | None = None
    approver: str = Field(min_length=1)
    comment: str = ""


class Reject(_Payload):
    """{"stage": "eu-west-1/prod", "approver": "alice", "reason": "..."} — rolls back by the rollback scope."""

    stage: str | None = None
    wave: int | None = None
    approver: str = Field(min_length=1)
    reason: str = Field(min_length=1)


class Pause(_Payload):
    by: str = Field(min_length=1)
    reason: str = ""


class Resume(_Payload):
    by: str = Field(min_length=1)


class Abort(_Payload):
    by: str = Field(min_length=1)
    reason: str = Field(min_length=1)


class Rollback(_Payload):
    by: str = Field(min_length=1)
    reason: str = Field(min_length=1)
    scope: RollbackScope | None = None


class SkipSoak(_Payload):
    stage: str
    by: str = Field(min_length=1)
    reason: str = Field(min_length=1)


class OverrideWindow(_Payload):
    stage: str
    by: str = Field(min_length=1)
    reason: str = Field(min_length=1)


class Ack(BaseModel):
    """What every update returns: what was done, in one line."""

    ok: bool = True
    message: str


def payload_problems(err: ValidationError) -> list[str]:
    """One line per problem, naming the field: `reason: required field is missing`."""
    out = []
    for e in err.errors():
        field = ".".join(str(p) for p in e["loc"]) or "(payload)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "missing":
            msg = "required field is missing"
        elif e["type"] == "extra_forbidden":
            msg = "unknown field"
        out.append(f"{field}: {msg}")
    return out
