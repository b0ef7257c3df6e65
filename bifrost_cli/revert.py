"""`bifrost revert SERVICE --to VERSION`: undo a finished release without re-running its canaries and soaks.

Plain-text output with user text escaped for the terminal; exit codes as bifrost_cli/exits.py. The command itself is
in bifrost_cli/main.py. The workflow is named by string (RevertWorkflow) so the command loads no workflow code;
tests/cli/test_revert_cli.py checks the names.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import click
from pydantic import ValidationError

from bifrost_cli.canceled import canceled_outcome
from bifrost_cli.exits import EXIT_ABORTED, EXIT_INVALID, EXIT_OK, EXIT_ROLLED_BACK
from bifrost_cli.links import echo_current_link, echo_link
from bifrost_cli.listed import REVERT_WORKFLOW
from bifrost_cli.render import echo
from bifrost_cli.run_state import NoState, read_state
from common.problems import listing, payload_problems
from common.text import code_span
from common.text import markdown as md
from common.vocabulary import REVERT_TERMINAL
from workflows.revert.models import RevertInput, RevertState, starting_state

STATUS_QUERY = "status"
STARTED_WITHIN = 120.0  # seconds the command waits for the revert to pass its checks and the lock
# what the user typed, for each input field
_OPTION = {"service": "SERVICE", "to_version": "--to", "requested_by": "--as", "reason": "--reason", "release": "--release",
           "stages": "--stage", "image": "--image", "health_minutes": "--health-minutes", "on_conflict": "--queue"}


def exit_code_for(status: str) -> int:
    """The exit code for a revert's final status."""
    return {"reverted": EXIT_OK, "invalid": EXIT_INVALID, "rejected": EXIT_ABORTED, "aborted": EXIT_ABORTED}.get(
        status, EXIT_ROLLED_BACK)


def revert_input(data: dict[str, Any]) -> RevertInput:
    """The workflow's input from the options; a problem exits 2 here, naming the option, before Temporal is asked."""
    try:
        return RevertInput.model_validate({k: v for k, v in data.items() if v is not None})
    except ValidationError as err:
        lines = []
        for p in payload_problems(err, RevertInput):
            field, sep, rest = p.partition(":")
            lines.append(f"{_OPTION.get(field.split('.')[0], field)}{sep}{rest}")
        echo("revert refused, nothing was deployed:\n" + listing(lines), err=True)
        sys.exit(EXIT_INVALID)


def print_regions(state: RevertState) -> None:
    echo(f"  {'stage':<22} {'wave':>4}  {'status':<17} {'before -> now':<24} health")
    for r in state.regions:
        versions = f"{r.version_before or '?'} -> {r.version_now or '?'}"
        echo(f"  {r.key:<22} {r.wave:>4}  {r.status:<17} {versions:<24} {r.health or '-'}")
        if r.traffic:
            echo(f"  {'':<22}       traffic: {r.traffic}")


def print_state(state: RevertState) -> None:
    echo(f"{state.revert_id}: {state.service} back to {state.to_version} — {state.status}")
    echo(f"undoes {state.release or '?'} ({state.release_version or '?'}); asked by {state.requested_by}: "
         f"{state.request_reason}")
    if state.waiting_for:
        echo(f"waiting for: {state.waiting_for}")
    if state.reason:
        echo(f"reason: {state.reason}")
    print_regions(state)


def print_audit(state: RevertState, since: int = 0) -> int:
    for a in state.audit[since:]:
        echo(f"{a.at:%H:%M:%S} {a.who}: {a.action} {a.target or ''} {a.detail}".replace("  ", " ").rstrip())
    return len(state.audit)


async def start_revert(client: Any, inp: RevertInput, task_queue: str) -> Any:
    """Start the revert, or attach to the running one of the same service and version; a run under its id that no
    Bifrost worker will run (another type or task queue) is terminated first (bifrost_cli/claims.py)."""
    from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy, WorkflowIDReusePolicy

    from bifrost_cli.claims import Claim, bifrost_run
    from workflows.revert.details import revert_search

    await bifrost_run(client, Claim(inp.workflow_id, REVERT_WORKFLOW, task_queue, "bifrost revert", inp.requested_by,
                                    "the revert can start"))
    return await client.start_workflow(
        REVERT_WORKFLOW, inp, id=inp.workflow_id, task_queue=task_queue, result_type=RevertState,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING, id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        search_attributes=TypedSearchAttributes([  # the workflow's own mapping, of the state it starts with
            SearchAttributePair(u.key, u.value) for u in revert_search(starting_state(inp, inp.workflow_id))]),
        static_summary=md(f"revert {inp.service} to {inp.to_version} by {inp.requested_by}"),
        static_details=revert_header(inp),
    )


def revert_header(inp: RevertInput) -> str:
    """The revert page's static details: the version in a code span as typed (a Markdown escape inside a code span
    is shown as a backslash, '1\\.9.0')."""
    return (f"**revert** {md(inp.service)} to {code_span(inp.to_version)}, asked by {md(inp.requested_by)}: "
            f"{md(inp.reason)}")


async def revert_outcome(handle: Any) -> tuple[RevertState | None, str]:
    """The final state (the result, the failure's details, or the memo of an aborted one that ended Canceled) and the
    failure's message ('' when it reverted)."""
    from temporalio.client import WorkflowFailureError
    from temporalio.exceptions import CancelledError

    try:
        return await handle.result(), ""
    except WorkflowFailureError as err:
        cause = err.cause
        if isinstance(cause, CancelledError):  # aborted: the state the run wrote to its memo (workflows/controls/ending.py)
            canceled = await canceled_outcome(handle, RevertState)
            return canceled, f"revert {canceled.status}: {canceled.reason}" if canceled is not None else str(cause)
        details = getattr(cause, "details", None) or ()
        state = RevertState.model_validate(details[0]) if details else None
        return state, str(getattr(cause, "message", None) or cause or err)


async def run_revert(inp: RevertInput, *, wait: bool, task_queue: str) -> int:
    """Start; say what it undoes once its checks passed (or why it was refused); with `wait`, follow it to the end."""
    from worker.connect import connect

    client = await connect()
    handle = await start_revert(client, inp, task_queue)
    echo(f"started {handle.id}: {inp.service} back to {inp.to_version}")
    echo_link(client, handle.id, handle.result_run_id)
    result = asyncio.ensure_future(revert_outcome(handle))
    seen, shown_plan = 0, False
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STARTED_WITHIN
    while not result.done():
        state = await _state(handle)
        if state is not None:
            seen = print_audit(state, seen)
            if not shown_plan and state.status not in ("planning", *REVERT_TERMINAL):
                shown_plan = True
                echo(f"undoes {state.release} ({state.release_version}); the last wave first:")
                print_regions(state)
                if not wait:
                    how = "waits for the running rollout (queued)" if state.status == "queued" else "is under way"
                    echo(f"the revert {how}; follow it: bifrost status {handle.id}   (or the Temporal UI)")
                    result.cancel()
                    return EXIT_OK
        if not shown_plan and loop.time() > deadline:
            echo(f"{handle.id} has not passed its checks within {STARTED_WITHIN:g} s; is a `bifrost worker` running? "
                 f"Follow it: bifrost status {handle.id}", err=True)
            result.cancel()
            return EXIT_ROLLED_BACK
        await asyncio.wait([result], timeout=1.0)
    final, failure = result.result()
    if final is None:
        echo(failure, err=True)
        return EXIT_ROLLED_BACK
    print_audit(final, seen)
    print_regions(final)
    echo(f"{final.status}: {final.reason}", err=final.status != "reverted")
    return exit_code_for(final.status)


async def _state(handle: Any) -> RevertState | None:
    try:
        return RevertState.model_validate(await handle.query(STATUS_QUERY))
    except Exception:  # noqa: BLE001 - not yet started by a worker, or the worker restarts: the next poll tells
        return None


async def show_revert(revert_id: str, *, as_json: bool) -> int:
    """`bifrost status revert/...`: the revert's regions, versions, health and audit trail."""
    from worker.connect import connect

    client = await connect()
    handle = client.get_workflow_handle(revert_id)

    async def read() -> RevertState:
        # an aborted revert ended Canceled: its memo holds its final state, no worker needed
        return await canceled_outcome(handle, RevertState) or RevertState.model_validate(await handle.query(STATUS_QUERY))

    state = await read_state(handle, read)
    if isinstance(state, NoState):  # e.g. the last run failed on invalid input: one line, no traceback
        click.echo(state.line, err=True)
        return state.code
    if as_json:
        click.echo(state.model_dump_json(indent=2))
        return EXIT_OK
    print_state(state)
    echo("audit trail:")
    print_audit(state)
    await echo_current_link(client, handle)
    return EXIT_OK
