"""Client-side operations behind the CLI: submit, follow, status, list and updates.

The rollout workflow, its `status` query and its updates are named by string (checked against
`RolloutWorkflow` by tests/cli/test_cli.py), so the CLI never imports the workflow code and with it the
judge's scipy and matplotlib: a command starts in a fraction of a second.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import click
from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.service import RPCError

from activities.releases import RevertRecord
from bifrost_cli.canceled import canceled_outcome
from bifrost_cli.claims import Claim, bifrost_run
from bifrost_cli.exits import EXIT_OK, EXIT_ROLLED_BACK, exit_code_for
from bifrost_cli.links import current_link, ui_link
from bifrost_cli.listed import LISTED, ROLLOUT_WORKFLOW
from bifrost_cli.render import print_status, shown, state_table
from bifrost_cli.reverted import reset_line, reverted_line, reverts_of
from bifrost_cli.run_state import NoState, read_state
from common.problems import shorten
from common.text import markdown as md
from worker.connect import connect
from workflows import search
from workflows.request import RolloutRequest
from workflows.rollout.details import view as rollout_view
from workflows.rollout.models import RolloutState, submitted
from workflows.rollout.updates import Ack

if TYPE_CHECKING:  # loaded by the commands that send updates, not by every command
    from temporalio.workflow import UpdateMethodMultiParam

    from workflows.rollout.workflow import RolloutWorkflow

P = TypeVar("P", bound=BaseModel)
STATUS_QUERY = "status"
UPDATES = ("approve", "reject", "pause", "resume", "abort", "rollback", "skip_soak", "override_window", "resolve_hold")


def outcome_state(err: WorkflowFailureError) -> RolloutState | None:
    """The state a rollout attached to its failure (RolledBack, Rejected, Aborted, Failed, InvalidRequest)."""
    cause = err.cause
    if isinstance(cause, ApplicationError) and cause.details:
        try:
            return RolloutState.model_validate(cause.details[0])
        except ValidationError:
            return None
    return None


async def canceled_state(handle: WorkflowHandle[Any, Any]) -> RolloutState | None:
    """The final state of a rollout that ended Canceled (aborted): the memo it wrote right before it ended."""
    return await canceled_outcome(handle, RolloutState)


async def outcome(handle: WorkflowHandle[Any, RolloutState]) -> RolloutState:
    """How a rollout ended: its result when it succeeded, the state in its failure's details when it failed, its
    memo when it was aborted (Canceled)."""
    try:
        return await handle.result()
    except WorkflowFailureError as err:
        state = outcome_state(err)
        if state is None and isinstance(err.cause, CancelledError):
            state = await canceled_state(handle)
        if state is None:
            raise
        return state


async def start_rollout(client: Client, req: RolloutRequest, task_queue: str = "bifrost") -> WorkflowHandle[Any, RolloutState]:
    """Start the rollout, or attach to the running one with the same service and version; a run under its id that
    no Bifrost worker will run (another type or task queue) is terminated first (bifrost_cli/claims.py)."""
    await bifrost_run(client, Claim(req.workflow_id, ROLLOUT_WORKFLOW, task_queue, "bifrost submit", req.requested_by,
                                    "the rollout can start"))
    return await client.start_workflow(
        ROLLOUT_WORKFLOW,
        req,
        id=req.workflow_id,
        task_queue=task_queue,
        result_type=RolloutState,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        search_attributes=_submitted_attributes(req),
        static_summary=f"{req.service} {req.version} by {md(req.requested_by)}",
        static_details=_static_details(req),
    )


def _submitted_attributes(req: RolloutRequest) -> TypedSearchAttributes:
    """The search attributes of a rollout just submitted (queued for its lock), by the rollout's own mapping."""
    state = submitted(req.workflow_id, req.service, req.version, at=datetime.now(UTC))
    attributes, _ = rollout_view(state, requested_by=req.requested_by)
    return TypedSearchAttributes([SearchAttributePair(u.key, u.value) for u in attributes])


def _static_details(req: RolloutRequest) -> str:
    change = req.change
    lines = [f"**{req.service}** `{req.version}` ({md(req.image)}), requested by {md(req.requested_by)}"]
    if change.commit or change.pr:
        lines.append(md(f"Change: commit {change.commit or '-'}, PR {change.pr or '-'} {change.url or ''}"))
    lines.append("Regions: " + ", ".join(f"{r.name} ({'+'.join(r.environments)})" for r in req.regions))
    return "\n\n".join(lines)


async def query_status(handle: WorkflowHandle[Any, Any]) -> RolloutState:
    """The rollout's `status` query."""
    state: RolloutState = await handle.query(STATUS_QUERY, result_type=RolloutState)
    return state


async def follow_rollout(handle: WorkflowHandle[Any, RolloutState], console: Console, interval: float = 1.0) -> RolloutState:
    """Redraw the stage table from the `status` query until the rollout ends."""
    result_task = asyncio.ensure_future(outcome(handle))
    with Live(console=console, refresh_per_second=4, transient=False) as live:
        while not result_task.done():
            try:
                live.update(state_table(await query_status(handle)))
            except RPCError:
                pass  # the worker may be restarting; the next poll will tell
            await asyncio.wait([result_task], timeout=interval)
        result = result_task.result()
        live.update(state_table(result))
    return result


async def submit(req: RolloutRequest, *, wait: bool, follow: bool, task_queue: str, console: Console,
                 connect_kwargs: dict[str, Any] | None = None) -> int:
    client = await connect(**(connect_kwargs or {}))  # tracing interceptors, when OTEL_EXPORTER_OTLP_ENDPOINT is set
    handle = await start_rollout(client, req, task_queue)
    console.print(Text.assemble("rollout ", (handle.id, "bold"), f" (run {handle.result_run_id})"))
    link = ui_link(client, handle.id, handle.result_run_id)
    if link is not None:
        console.print(Text(f"Web UI: {link}"), soft_wrap=True)
    if not wait:
        console.print(Text(f"follow it: bifrost status {handle.id}   or the Temporal UI's workflow page"))
        return 0
    try:
        result = await (follow_rollout(handle, console) if follow else outcome(handle))
    except WorkflowFailureError as err:  # terminated, timed out, or failed outside Bifrost's own handling
        cause = err.cause
        console.print(Text(f"failed: the rollout ended without a result: {shorten(str(getattr(cause, 'message', None) or cause or err), 400)}",
                           style="bold red"), soft_wrap=True)
        return EXIT_ROLLED_BACK
    console.print(Text.assemble((result.status, "bold"), shown(f": {result.reason}")), soft_wrap=True)
    return exit_code_for(result.status)


async def show_status(rollout_id: str, *, as_json: bool, console: Console) -> int:
    """`bifrost status`: the rollout's state, or one line (and its exit code) when the run has none to show."""
    client = await connect()
    handle = client.get_workflow_handle(rollout_id)
    # an aborted rollout's memo needs no worker
    state = await read_state(handle, lambda: _state_of(handle))
    if isinstance(state, NoState):  # e.g. the last run failed on invalid input: one line, no traceback
        click.echo(state.line, err=True)
        return state.code
    reverted = (await reverts_of(client, state.service, (await handle.describe()).task_queue)).get(rollout_id)
    if as_json:
        data = state.model_dump(mode="json")
        if reverted is not None:
            data["reverted_by"] = reverted.model_dump(mode="json")
        console.print_json(json.dumps(data))
        return EXIT_OK
    print_status(state, rollout_id, console)
    reset = reset_line([e async for e in handle.fetch_history_events()])
    if reset is not None:
        console.print(shown(reset), style="bold", soft_wrap=True)
    if reverted is not None:
        console.print(shown(reverted_line(reverted)), style="bold yellow", soft_wrap=True)
    link = await current_link(client, handle)
    if link is not None:
        console.print(Text(f"Web UI: {link}"), soft_wrap=True)
    return EXIT_OK


async def _state_of(handle: WorkflowHandle[Any, Any]) -> RolloutState:
    return await canceled_state(handle) or await query_status(handle)


async def list_rollouts(*, service: str | None, status: str | None, limit: int, console: Console) -> None:
    """`service` and `status` go into a visibility query: the CLI lets through only names and known statuses."""
    client = await connect()
    clauses = ["(" + " OR ".join(f"WorkflowType = '{kind}'" for kind in LISTED) + ")"]
    if service:
        clauses.append(f"BifrostService = '{service}'")
    if status:
        clauses.append(f"BifrostStatus = '{status}'")
    rows = []
    async for wf in client.list_workflows(" AND ".join(clauses)):
        rows.append(wf)
        if len(rows) >= limit:
            break
    t = Table()
    for col in ("rollout", "status", "stage", "requested by", "started"):  # ids and the revert a status names: folded,
        t.add_column(col, overflow="fold")                                # never cut short in a narrow terminal
    reverted: dict[tuple[str, str], dict[str, RevertRecord]] = {}  # (service, task queue) -> release -> revert
    for wf in rows:
        sa = wf.typed_search_attributes
        status, svc = sa.get(search.STATUS) or "?", sa.get(search.SERVICE)
        if wf.workflow_type == "RolloutWorkflow" and status == "succeeded" and svc:
            if (svc, wf.task_queue) not in reverted:
                reverted[svc, wf.task_queue] = await reverts_of(client, svc, wf.task_queue)
            rec = reverted[svc, wf.task_queue].get(wf.id)
            if rec is not None:
                at = f"{rec.ended_at:%Y-%m-%d %H:%M}" if rec.ended_at else "?"
                status = f"succeeded, REVERTED by {rec.revert_id} at {at}"
        t.add_row(Text(wf.id), Text(status), Text(sa.get(search.STAGE) or "-"),
                  shown(sa.get(search.REQUESTED_BY) or "?"), Text(f"{wf.start_time:%Y-%m-%d %H:%M}"))
    console.print(t)


async def send_update(rollout_id: str, update: UpdateMethodMultiParam[[RolloutWorkflow, P], Any], payload: P, *,
                      console: Console, err_console: Console) -> bool:
    """Run a validated update (a RolloutWorkflow update method and its payload model); print the acknowledgement
    or the validator's reason. Temporal's own refusals (unknown id, payload too large) propagate as RPCError."""
    from workflows.rollout.workflow import RolloutWorkflow

    name = getattr(update, "__name__", "update")
    client = await connect()
    handle = client.get_workflow_handle_for(RolloutWorkflow.run, rollout_id)
    try:
        ack: Ack = await handle.execute_update(update, payload)
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        reason = shorten(str(getattr(cause, "message", None) or cause or err), 400)
        err_console.print(Text(f"{name} refused: {reason}", style="red"), soft_wrap=True)
        return False
    console.print(shown(ack.message), soft_wrap=True)
    return True
