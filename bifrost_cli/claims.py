"""Runs under Bifrost's ids that Bifrost did not start: find them, and end the ones no Bifrost worker will run.

Anyone with namespace access may start any workflow type under any id on any task queue (docs/security.md).
Before the CLI starts or attaches to `rollout/<svc>/<version>`, `revert/<svc>/<version>`, `traffic/<svc>` or
`guard/<svc>`, it describes the running run there and judges it only by what the server sets (its workflow
type, its task queue, its status), never by search attributes or memo, which the starter chose:

- Bifrost's (the expected type on Bifrost's task queue): kept; the caller attaches to it or refuses as busy. One
  no worker has polled yet is still Bifrost's: a worker may be starting.
- an impostor (another type, or another task queue: no Bifrost worker will ever run it): terminated, with a
  reason that says why and who, and one line saying so; then the caller starts as usual.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click
from temporalio.client import Client, WorkflowExecutionDescription, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from common.text import terminal

IMPOSTOR_TRIES = 3  # impostors ended in a row before the caller goes on anyway (its start then tells)
_GONE = (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION)  # ended between describe and terminate


@dataclass(frozen=True)
class Claim:
    """Who asks for an id, and what Bifrost would run there: the words of the termination reason."""

    workflow_id: str
    workflow_type: str
    task_queue: str
    command: str  # e.g. "bifrost submit"
    who: str
    purpose: str  # e.g. "the rollout can start"


def impostor_reason(described: WorkflowExecutionDescription, claim: Claim) -> str | None:
    """Why the running run is not Bifrost's, from server-set facts only; None when it is Bifrost's."""
    if described.workflow_type != claim.workflow_type:
        return f"runs workflow type {described.workflow_type!r}, not {claim.workflow_type!r}"
    if described.task_queue != claim.task_queue:
        return f"runs on task queue {described.task_queue!r}, not {claim.task_queue!r}"
    return None


async def _running(client: Client, workflow_id: str) -> WorkflowExecutionDescription | None:
    """The id's current run if it is running, else None (none, or it ended)."""
    try:
        described = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    return described if described.status == WorkflowExecutionStatus.RUNNING else None


async def bifrost_run(client: Client, claim: Claim) -> WorkflowExecutionDescription | None:
    """Bifrost's running run under `claim.workflow_id`, or None once nothing runs there: every impostor found on
    the way is terminated (that very run, by its run id) and named in one line on stderr."""
    for _ in range(IMPOSTOR_TRIES):
        described = await _running(client, claim.workflow_id)
        if described is None:
            return None
        why = impostor_reason(described, claim)
        if why is None:
            return described
        reason = terminal(f"not a Bifrost run: {why}; terminated by {claim.command} (by {claim.who}) so that "
                          f"{claim.purpose}")
        await _terminate(client, claim.workflow_id, described.run_id, reason)
        click.echo(terminal(f"terminated {claim.workflow_id} (run {described.run_id}): {reason}"), err=True)
    return None  # started again and again: the start that follows tells what it finds


async def _terminate(client: Client, workflow_id: str, run_id: Any, reason: str) -> None:
    """Terminate that run; one that ended meanwhile (not found, already completed) is fine."""
    try:
        await client.get_workflow_handle(workflow_id, run_id=run_id).terminate(reason=reason)
    except RPCError as err:
        if err.status not in _GONE:
            raise
