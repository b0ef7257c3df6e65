"""The shapes every update shares: the strict payload base, the one-line acknowledgement, who acts, pause and resume,
and how a validator refuses."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field
from temporalio.exceptions import ApplicationError

from common.text import MAX_IDENTITY, Identity
from common.types import REFUSED


class Payload(BaseModel):
    """Base of every update payload: one JSON object, typed into the UI's update dialog.

    Strict: `"wave": true` or `"wave": "1"` is refused, never read as wave 1; unknown fields are refused."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, strict=True)


class Ack(BaseModel):
    """What every update returns: what was done, in one line."""

    ok: bool = True
    message: str


Name = Annotated[Identity, Field(min_length=1, max_length=MAX_IDENTITY, description="who acts (recorded in the audit trail)")]


class Pause(Payload):
    """{"by": "alice", "reason": "db migration"} — holds at the next safe point."""

    by: Name
    reason: str = Field(default="", max_length=2000)


class Resume(Payload):
    """{"by": "alice"}"""

    by: Name


def refused(message: str) -> ApplicationError:
    """A validator's refusal: one line for the UI and the CLI, with no stack trace (worker/converter.py)."""
    return ApplicationError(message, type=REFUSED, non_retryable=True)
