"""One 'describe this run, or None if there is none' for the activities that look at other workflows' runs (the
cross-namespace claim check, the reaper's run_is_open, a stage's origin): NOT_FOUND is an answer, not an error."""

from __future__ import annotations

from datetime import timedelta

from temporalio.client import Client, WorkflowExecutionDescription
from temporalio.service import RPCError, RPCStatusCode

# One RPC to another workflow's run (describe, signal, cancel), under the start-to-close of every activity that makes
# one (options.SIGNAL and WATCH 20 s, ORIGIN 30 s): an attempt fails with the RPC's error, not by timing out.
SHORT_RPC_TIMEOUT = timedelta(seconds=15)


async def describe_run(client: Client, workflow_id: str, run_id: str | None = None) -> WorkflowExecutionDescription | None:
    """That run (or the latest run) of `workflow_id`, described; None if there is none."""
    try:
        return await client.get_workflow_handle(workflow_id, run_id=run_id).describe(rpc_timeout=SHORT_RPC_TIMEOUT)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
