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

import click
from temporalio.client import Client, WorkflowExecutionDescription, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from activities.peers import terminate_run
from common.runs import foreign_run
from common.text import terminal

IMPOSTOR_TRIES = 3  # impostors ended in a row before the caller goes on anyway (its start then tells)


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
    return foreign_run(described.workflow_type, described.task_queue, want_type=claim.workflow_type,
                       want_queue=claim.task_queue)


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
        await terminate_run(client, claim.workflow_id, described.run_id, reason)
        click.echo(terminal(f"terminated {claim.workflow_id} (run {described.run_id}): {reason}"), err=True)
    return None  # started again and again: the start that follows tells what it finds
