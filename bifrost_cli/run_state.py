"""What a status command shows when the run it names has no state to show, in one line and an exit code.

Anyone may start any workflow type under any id with any input, or terminate a run at once (docs/security.md):
a run that failed on invalid start input (an `InvalidPayload` failure) never built a state, and its `status`
query fails on every replay; a run of another type, or one whose answer is not the expected model, cannot be
read either. `bifrost status`, `traffic status`, `guard status` and a revert's status read the state through
`read_state`, which says so instead of printing the SDK's traceback.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import ValidationError
from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowHistoryEventFilterType,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.service import RPCError, RPCStatusCode

from bifrost_cli.exits import EXIT_ABORTED, EXIT_INVALID, EXIT_ROLLED_BACK
from common.failures import INVALID_PAYLOAD
from common.problems import shorten
from common.text import terminal

T = TypeVar("T")

# Temporal could not be reached: left to the command's own handler (exit 4 and what to do)
_CONNECTION = (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.UNAUTHENTICATED,
               RPCStatusCode.NOT_FOUND)
MAX_REASON = 300  # characters of the run's own failure message shown


@dataclass(frozen=True)
class NoState:
    """A run with no state to show: the one line saying why (already escaped for the terminal) and the exit code."""

    line: str
    code: int


def _ended(status: WorkflowExecutionStatus | None) -> str:
    return (status.name.lower().replace("_", " ") if status is not None else "unknown")


async def _close_failure(handle: WorkflowHandle[Any, Any]) -> tuple[str, str] | None:
    """The (type, message) of the failure the run ended with, read from its close event alone; None if none."""
    async for event in handle.fetch_history_events(event_filter_type=WorkflowHistoryEventFilterType.CLOSE_EVENT):
        if event.HasField("workflow_execution_failed_event_attributes"):
            failure = event.workflow_execution_failed_event_attributes.failure
            return failure.application_failure_info.type, failure.message
    return None


def _line(workflow_id: str, what: str, message: str) -> str:
    return terminal(f"{workflow_id}: {what}: {shorten(message, MAX_REASON)}")


async def read_state(handle: WorkflowHandle[Any, Any], read: Callable[[], Awaitable[T]]) -> T | NoState:
    """`read()` (the run's state: its own memo or its `status` query), or a `NoState` when the run has none:
    it failed on invalid start input (exit 2, its failure's message), or its state cannot be read (the run
    terminated at once, is of another workflow type, answers with something else: exit 1, or 3 if terminated)."""
    desc = await handle.describe()
    if desc.status == WorkflowExecutionStatus.FAILED:
        failure = await _close_failure(handle)
        if failure is not None and failure[0] == INVALID_PAYLOAD:
            return NoState(_line(handle.id, "the last run failed on invalid input, so it has no state", failure[1]),
                           EXIT_INVALID)
    try:
        return await read()
    except RPCError as err:
        if err.status in _CONNECTION:
            raise
        reason = err.message or str(err)
    except (WorkflowQueryFailedError, WorkflowQueryRejectedError, ValidationError, TypeError, ValueError) as err:
        reason = getattr(err, "message", None) or str(err)
    if desc.status == WorkflowExecutionStatus.RUNNING:
        what = "its state cannot be read"
    else:
        what = f"the last run ended {_ended(desc.status)} ({desc.workflow_type}) and its state cannot be read"
    code = EXIT_ABORTED if desc.status in (WorkflowExecutionStatus.TERMINATED, WorkflowExecutionStatus.CANCELED) else (
        EXIT_ROLLED_BACK)
    return NoState(_line(handle.id, what, reason), code)
