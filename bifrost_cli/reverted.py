"""Which releases a revert put back, and who reset a run, for `bifrost status` and `bifrost list`: from histories.

A rollout's run is closed when a revert undoes it, so its page and its search attributes still say how it ended.
Whether it was reverted is read from the reverts' own histories (activities/releases.py `verified_revert`): the list
only says which histories to read, never what they hold, since anyone may start a run with any search attributes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from activities.releases import RevertRecord, verified_revert

SERVER_IDENTITY = "history-service"  # the identity the server writes when the reset request gave none
MAX_REVERTS = 20  # revert histories read per service, newest first


def _quoted(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


async def reverts_of(client: Client, service: str, task_queue: str) -> dict[str, RevertRecord]:
    """release id -> the latest verified revert that put it back (completed on `task_queue`)."""
    query = f"WorkflowType = 'RevertWorkflow' AND BifrostService = {_quoted(service)} AND ExecutionStatus = 'Completed'"
    out: dict[str, RevertRecord] = {}
    n = 0
    async for wf in client.list_workflows(query):
        if wf.status != WorkflowExecutionStatus.COMPLETED:
            continue
        n += 1
        if n > MAX_REVERTS:
            break
        try:
            history = await client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()
        except RPCError:
            continue  # gone meanwhile (retention): nothing to say
        rec = verified_revert(history.events, revert_id=wf.id, task_queue=task_queue)
        if rec is not None and (rec.release not in out or _later(rec.ended_at, out[rec.release].ended_at)):
            out[rec.release] = rec
    return out


def _later(a: datetime | None, b: datetime | None) -> bool:
    return a is not None and (b is None or a > b)


def reverted_line(rec: RevertRecord) -> str:
    """What `status` prints under a reverted release (plain text; the caller escapes it for the terminal)."""
    at = f"{rec.ended_at:%Y-%m-%d %H:%M} UTC" if rec.ended_at else "?"
    return (f"REVERTED by {rec.revert_id} at {at}: back on {rec.to_version}, asked by {rec.requested_by or '?'}"
            + (f" ({rec.reason})" if rec.reason else ""))


def reset_line(events: list[Any]) -> str | None:
    """Who reset this run and why, from its history's reset event (the server writes it: WorkflowTaskFailed, cause
    ResetWorkflow, the request's reason and identity); None when the run is not a reset. Plain text."""
    for e in events:
        if e.event_type != EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            continue
        a = e.workflow_task_failed_event_attributes
        if a.cause != WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW:
            continue
        who = (f" by {a.identity}" if a.identity and a.identity != SERVER_IDENTITY else "")
        unnamed = "" if who else "; the server records no name for a reset: write yours in the reason"
        at = f"{e.event_time.ToDatetime():%Y-%m-%d %H:%M} UTC" if e.HasField("event_time") else "?"
        return f"RESET{who} at {at}: {a.failure.message or 'no reason given'} (from run {a.base_run_id}{unnamed})"
    return None
