"""Which releases a revert put back, for `bifrost status` and `bifrost list`: the revert's own verified record.

A rollout's run is closed when a revert undoes it, so its page and its search attributes still say how it ended.
Whether it was reverted is read from the reverts' own histories (activities/releases.py `verified_revert`): the list
only says which histories to read, never what they hold, since anyone may start a run with any search attributes.
"""

from __future__ import annotations

from datetime import datetime

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from activities.releases import RevertRecord, verified_revert

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
