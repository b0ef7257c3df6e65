"""Client-side operations behind the CLI: submit, follow, status, list and updates."""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.live import Live
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.workflow import UpdateMethodMultiParam

from bifrost_cli.exits import exit_code_for
from bifrost_cli.render import state_table
from worker.connect import connect
from workflows import search
from workflows.models import RolloutState
from workflows.request import RolloutRequest
from workflows.rollout import RolloutWorkflow
from workflows.updates import Ack

P = TypeVar("P", bound=BaseModel)


def outcome_state(err: WorkflowFailureError) -> RolloutState | None:
    """The state a rollout attached to its failure (RolledBack, Rejected, Aborted, Failed, InvalidRequest)."""
    cause = err.cause
    if isinstance(cause, ApplicationError) and cause.details:
        try:
            return RolloutState.model_validate(cause.details[0])
        except ValidationError:
            return None
    return None


async def outcome(handle: WorkflowHandle[Any, RolloutState]) -> RolloutState:
    """How a rollout ended: its result when it succeeded, the state in its failure's details otherwise."""
    try:
        return await handle.result()
    except WorkflowFailureError as err:
        state = outcome_state(err)
        if state is None:
            raise
        return state


async def start_rollout(client: Client, req: RolloutRequest, task_queue: str = "bifrost") -> WorkflowHandle:
    """Start the rollout, or attach to the running one with the same service and version."""
    return await client.start_workflow(
        RolloutWorkflow.run,
        req,
        id=req.workflow_id,
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        search_attributes=TypedSearchAttributes([
            SearchAttributePair(search.SERVICE, req.service),
            SearchAttributePair(search.VERSION, req.version),
            SearchAttributePair(search.STATUS, "queued"),
            SearchAttributePair(search.STAGE, "-"),
            SearchAttributePair(search.ENVIRONMENT, "-"),
            SearchAttributePair(search.REQUESTED_BY, req.requested_by),
        ]),
        static_summary=f"{req.service} {req.version} by {req.requested_by}",
        static_details=_static_details(req),
    )


def _static_details(req: RolloutRequest) -> str:
    change = req.change
    lines = [f"**{req.service}** `{req.version}` ({req.image}), requested by {req.requested_by}"]
    if change.commit or change.pr:
        lines.append(f"Change: commit {change.commit or '-'}, PR {change.pr or '-'} {change.url or ''}")
    lines.append("Regions: " + ", ".join(f"{r.name} ({'+'.join(r.environments)})" for r in req.regions))
    return "\n\n".join(lines)


async def follow_rollout(handle: WorkflowHandle, console: Console, interval: float = 1.0) -> RolloutState:
    """Redraw the stage table from the `status` query until the rollout ends."""
    result_task = asyncio.ensure_future(outcome(handle))
    with Live(console=console, refresh_per_second=4, transient=False) as live:
        while not result_task.done():
            try:
                state = await handle.query(RolloutWorkflow.status)
                live.update(state_table(state))
            except RPCError:
                pass  # the worker may be restarting; the next poll will tell
            await asyncio.wait([result_task], timeout=interval)
        result = result_task.result()
        live.update(state_table(result))
    return result


async def submit(req: RolloutRequest, *, wait: bool, follow: bool, task_queue: str, console: Console) -> int:
    client = await connect()
    handle = await start_rollout(client, req, task_queue)
    console.print(f"rollout [bold]{handle.id}[/bold] (run {handle.result_run_id})")
    if not wait:
        console.print(f"follow it: bifrost status {handle.id}   or the Temporal UI's workflow page")
        return 0
    result = await (follow_rollout(handle, console) if follow else outcome(handle))
    console.print(f"[bold]{result.status}[/bold]: {result.reason}")
    return exit_code_for(result.status)


async def show_status(rollout_id: str, *, as_json: bool, console: Console) -> None:
    client = await connect()
    state = await client.get_workflow_handle(rollout_id).query(RolloutWorkflow.status)
    if as_json:
        console.print_json(state.model_dump_json())
        return
    console.print(state_table(state))
    if state.pending_approvals:
        console.print(f"pending approvals: {', '.join(state.pending_approvals)} — "
                      f"bifrost approve {rollout_id} --stage <stage> | --wave <n>")
    if state.audit:
        console.print("audit trail:")
        for a in state.audit:
            console.print(f"  {a.at:%Y-%m-%d %H:%M:%S} {a.who}: {a.action} {a.target or ''} {a.detail}")


async def list_rollouts(*, service: str | None, status: str | None, limit: int, console: Console) -> None:
    from rich.table import Table

    client = await connect()
    clauses = ["WorkflowType = 'RolloutWorkflow'"]
    if service:
        clauses.append(f"BifrostService = '{service}'")
    if status:
        clauses.append(f"BifrostStatus = '{status}'")
    t = Table("rollout", "status", "stage", "requested by", "started")
    n = 0
    async for wf in client.list_workflows(" AND ".join(clauses)):
        sa = wf.typed_search_attributes
        t.add_row(wf.id, sa.get(search.STATUS) or "?", sa.get(search.STAGE) or "-", sa.get(search.REQUESTED_BY) or "?",
                  f"{wf.start_time:%Y-%m-%d %H:%M}")
        n += 1
        if n >= limit:
            break
    console.print(t)


async def send_update(rollout_id: str, update: UpdateMethodMultiParam[[RolloutWorkflow, P], Any], payload: P, *,
                      console: Console, err_console: Console) -> bool:
    """Run a validated update (a RolloutWorkflow method and its payload model); print the acknowledgement or
    the validator's reason."""
    client = await connect()
    handle = client.get_workflow_handle_for(RolloutWorkflow.run, rollout_id)
    name = getattr(update, "__name__", "update")
    try:
        ack: Ack = await handle.execute_update(update, payload)
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        err_console.print(f"[red]{name} refused: {getattr(cause, 'message', None) or cause or err}[/red]")
        return False
    except RPCError as err:
        err_console.print(f"[red]{name} failed: {err.message}[/red]\nIs {rollout_id} the right id? `bifrost list` shows rollouts.")
        return False
    console.print(ack.message)
    return True
