"""`bifrost evacuate`, `bifrost restore` and `bifrost traffic ...`: move a region's traffic away and back.

Plain-text output; the exit codes are the project's (bifrost_cli/exits.py). The commands talk to Temporal
only; the worker's targets file says where each region's record and workload are.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

import click
from pydantic import BaseModel, ValidationError

from bifrost_cli.canceled import canceled_outcome
from bifrost_cli.exits import EXIT_ABORTED, EXIT_INVALID, EXIT_OK, EXIT_ROLLED_BACK, EXIT_UNREACHABLE
from bifrost_cli.links import echo_current_link, echo_link
from bifrost_cli.render import echo
from bifrost_cli.run_state import NoState, read_state
from common.text import markdown as md
from common.text import terminal
from workflows.evacuation.models import EvacuationState, aborted_message
from workflows.evacuation.settings import EvacuationInput, evacuation_id

TRAFFIC_EXIT_CODES = """\b
Exit codes:
  0  done (evacuated / restored), or started without --wait
  1  an alarm reverted it to the last healthy step, or it failed
  2  refused before anything changed (unknown region, last region, bad steps,
     missing record, a receiver that cannot be scaled enough, nothing to restore)
  3  aborted, or another traffic change of the service is running
  4  Temporal could not be reached
"""


def exit_code_for(status: str) -> int:
    """The exit code for an evacuation's final status."""
    return {"evacuated": EXIT_OK, "restored": EXIT_OK, "refused": EXIT_INVALID, "aborted": EXIT_ABORTED}.get(status, EXIT_ROLLED_BACK)


def _identity() -> str:
    return os.environ.get("BIFROST_USER") or getpass.getuser()


def _fail(message: str, code: int) -> None:
    click.echo(message, err=True)
    sys.exit(code)


def _run(coro: Coroutine[Any, Any, int]) -> int:
    """Run a client coroutine; a connection failure exits 4 with what to do next."""
    from temporalio.service import RPCError, RPCStatusCode

    address = os.environ.get("TEMPORAL_ADDRESS", "localhost:7233")
    hint = "Start one with `bifrost server`, or set TEMPORAL_ADDRESS / TEMPORAL_NAMESPACE / TEMPORAL_API_KEY."
    try:
        return asyncio.run(coro)
    except RPCError as err:
        if err.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.UNAUTHENTICATED):
            _fail(f"could not reach Temporal at {address}: {err.message}\n{hint}", EXIT_UNREACHABLE)
        _fail(f"Temporal refused the request: {err.message}\nIs a `bifrost worker` running?", EXIT_ROLLED_BACK)
    except RuntimeError as err:
        if "connect" not in str(err).lower():
            raise
        _fail(f"could not reach Temporal at {address}: {err}\n{hint}", EXIT_UNREACHABLE)
    return EXIT_ROLLED_BACK  # not reached: _fail exits


def _csv_ints(value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        return [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected whole numbers separated by commas, e.g. 67,33,0; got {value!r}") from None


def _problems(err: ValidationError) -> str:
    """One line per problem, naming the field."""
    return "\n".join(f"  - {'.'.join(str(p) for p in e['loc'])}: {e['msg'].removeprefix('Value error, ')}" for e in err.errors())


M = TypeVar("M", bound=BaseModel)


def validated(model: type[M], data: dict[str, Any], nothing: str = "nothing was changed") -> M:
    """A workflow input from the options (the model, then its cross-field `problems()`); any problem exits 2
    here, naming the field, before Temporal is contacted."""
    try:
        inp = model.model_validate(data)
    except ValidationError as err:
        _fail(f"refused, {nothing}:\n{_problems(err)}", EXIT_INVALID)
        raise  # not reached
    problems: list[str] = inp.problems()  # type: ignore[attr-defined]
    if problems:
        _fail(f"refused, {nothing}:\n" + "\n".join(f"  - {p}" for p in problems), EXIT_INVALID)
    return inp


def _input(data: dict[str, Any]) -> EvacuationInput:
    """The evacuation's input from the options."""
    return validated(EvacuationInput, {k: v for k, v in data.items() if v is not None})


# -- printing -------------------------------------------------------------------------------------
def weights_lines(state: EvacuationState) -> list[str]:
    """One line per region: weight before, now and planned end, replicas before and now (and an HPA's floor)."""
    ids = state.set_identifiers or {k: k for k in state.weights_before}
    by_id = {sid: region for region, sid in ids.items()}
    final = state.planned[-1] if state.planned else {}
    lines = [f"  {'region':<16} {'weight before':>13} {'now':>5} {'planned':>8}   replicas before -> now"]
    for sid in sorted(state.weights_before or state.weights_now):
        region = by_id.get(sid, sid)
        now_replicas = state.replicas_after.get(region, state.scaled.get(region, state.replicas_before.get(region)))
        hpa = state.autoscalers.get(region)
        floor = "" if hpa is None or region not in state.min_replicas_before else (
            f"   HPA {hpa} minReplicas {state.min_replicas_before[region]} -> "
            f"{state.min_replicas_now.get(region, state.min_replicas_before[region])}")
        lines.append(f"  {region:<16} {state.weights_before.get(sid, '-')!s:>13} {state.weights_now.get(sid, '-')!s:>5} "
                     f"{final.get(sid, '-')!s:>8}   {state.replicas_before.get(region, '-')} -> {now_replicas if now_replicas is not None else '-'}"
                     f"{floor}")
    return lines


def print_state(state: EvacuationState) -> None:
    echo(f"{state.workflow_id}: {state.direction} {state.region} ({state.service}) — {state.status}")
    echo(f"requested by {state.requested_by}: {state.request_reason or '(no reason given)'}")
    if state.record_set:
        echo(f"record set: {state.record_set}; step {state.step}/{len(state.planned)}; "
             f"wait {state.wait_seconds} s after each step")
    if state.reason:
        echo(f"reason: {state.reason}")
    if state.waiting_for:
        echo(f"waiting for: {state.waiting_for}")
    if state.weights_before:
        for line in weights_lines(state):
            echo(line)
    for st in state.steps:
        mark = "" if st.changed else " (already in place)"
        echo(f"  step {st.index}: {st.level}% {st.weights}{mark}; health: {st.health or 'pending'}")


def print_audit(state: EvacuationState, since: int = 0) -> int:
    for a in state.audit[since:]:
        echo(f"{a.at:%H:%M:%S} {a.who}: {a.action} {a.detail}".rstrip())
    return len(state.audit)


# -- client operations ----------------------------------------------------------------------------
async def start_traffic(client: Any, inp: EvacuationInput, task_queue: str) -> Any:
    """Start the service's traffic workflow; refuse (WorkflowAlreadyStartedError) while another one runs."""
    from temporalio.common import TypedSearchAttributes, WorkflowIDConflictPolicy, WorkflowIDReusePolicy

    from workflows.evacuation.details import evacuation_search
    from workflows.evacuation.workflow import EvacuationWorkflow

    return await client.start_workflow(
        EvacuationWorkflow.run, inp, id=inp.workflow_id, task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.FAIL, id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        search_attributes=TypedSearchAttributes(evacuation_search(EvacuationState.of(inp, inp.workflow_id))),
        static_summary=md(f"{inp.direction} {inp.region} ({inp.service}) by {inp.requested_by}"),
        static_details=f"**{inp.direction}** {md(inp.region)} of {inp.service}, requested by {md(inp.requested_by)}: "
                       f"{md(inp.reason or '(no reason given)')}",
    )


async def traffic_outcome(handle: Any) -> tuple[EvacuationState | None, str]:
    """The final state (from the result, the failure's details, or the memo of an aborted one that ended Canceled)
    and the failure message if it did not succeed."""
    from temporalio.client import WorkflowFailureError
    from temporalio.exceptions import CancelledError

    try:
        return await handle.result(), ""
    except WorkflowFailureError as err:
        cause = err.cause
        details = getattr(cause, "details", None) or ()
        if isinstance(cause, CancelledError):
            state = await canceled_outcome(handle, EvacuationState)
            return state, aborted_message(state) if state is not None else str(cause)
        state = EvacuationState.model_validate(details[0]) if details else None
        return state, str(getattr(cause, "message", None) or cause or err)


async def traffic_moves(client: Any, service: str) -> list[EvacuationState | None]:
    """Every finished evacuation and restore of `service` (standalone or started by a rollout), oldest first; None
    for a run that ended without a state to show (e.g. terminated). A running one is left out: reading its outcome
    would wait for its end."""
    from temporalio.client import WorkflowExecutionStatus

    from worker.endpoints import machinery_client

    query = f"WorkflowId = '{evacuation_id(service)}'"
    runs = [(wf, c) for c in (client, machinery_client(client))  # a rollout's stages move traffic from the machinery
            async for wf in c.list_workflows(query) if wf.status != WorkflowExecutionStatus.RUNNING]
    return [(await traffic_outcome(c.get_workflow_handle(wf.id, run_id=wf.run_id, result_type=EvacuationState)))[0]
            for wf, c in sorted(runs, key=lambda run: run[0].start_time)]


async def running_change(client: Any, inp: EvacuationInput, task_queue: str) -> bool:
    """Whether a Bifrost run holds the service's traffic claim (`traffic/<service>`) now. A run there that no Bifrost
    worker will run (another type, another task queue) is terminated, so that it cannot block the service's traffic
    changes for ever (bifrost_cli/claims.py)."""
    from bifrost_cli.claims import Claim, bifrost_run
    from workflows.evacuation.workflow import EvacuationWorkflow

    claim = Claim(evacuation_id(inp.service), EvacuationWorkflow.__name__, task_queue, f"bifrost {inp.direction}",
                  inp.requested_by, f"the {inp.direction} can start")
    return await bifrost_run(client, claim) is not None


async def refuse_busy(client: Any, service: str) -> None:
    """Exit 3 at once: another traffic change of the service runs; name it, and how to watch or stop it."""
    from workflows.evacuation.workflow import EvacuationWorkflow

    what = evacuation_id(service)
    try:
        running = await asyncio.wait_for(client.get_workflow_handle(what).query(EvacuationWorkflow.status), 10)
        what = (f"{running.direction} {running.region} by {running.requested_by} ({running.status}, "
                f"{evacuation_id(service)})")
    except Exception:  # noqa: BLE001 - a run no worker answers for: its id is all there is to name
        what += " (it does not answer its status query)"
    _fail(f"refused, nothing was changed: another traffic change of {service} is running: {terminal(what)}.\nWait "
          f"for it (`bifrost traffic status {service}`) or stop it (`bifrost traffic abort {service} --reason ...`).",
          EXIT_ABORTED)


async def run_traffic(inp: EvacuationInput, *, wait: bool, task_queue: str) -> int:
    """Start, report the plan (or the refusal), and with `wait` follow the audit trail to the end."""
    from temporalio.client import WorkflowHandle
    from temporalio.exceptions import WorkflowAlreadyStartedError

    from worker.connect import connect
    from workflows.evacuation.workflow import EvacuationWorkflow

    client = await connect()
    if await running_change(client, inp, task_queue):  # a run no Bifrost worker will run is ended first
        await refuse_busy(client, inp.service)
    try:
        handle: WorkflowHandle[Any, Any] = await start_traffic(client, inp, task_queue)
    except WorkflowAlreadyStartedError:
        await refuse_busy(client, inp.service)
    click.echo(f"started {handle.id} (run {handle.result_run_id}): {inp.direction} {inp.region} of {inp.service}")
    echo_link(client, handle.id, handle.result_run_id)
    seen = 0
    result_task = asyncio.ensure_future(traffic_outcome(handle))
    planned = False
    while not result_task.done():
        try:
            state: EvacuationState = await handle.query(EvacuationWorkflow.status)
        except Exception:  # noqa: BLE001 - the worker may be restarting; the next poll will tell
            state = None  # type: ignore[assignment]
        if state is not None:
            seen = print_audit(state, seen)
            if not planned and state.status not in ("planning", "refused", "failed"):  # refusals: wait for the result
                planned = True
                click.echo("\n".join(weights_lines(state)))
                if not wait:
                    click.echo(f"follow it: bifrost traffic status {inp.service}   (or the Temporal UI's workflow page)")
                    result_task.cancel()
                    return EXIT_OK
        await asyncio.wait([result_task], timeout=1.0)
    final, failure = result_task.result()
    if final is not None:
        print_audit(final, seen)
        click.echo("\n".join(weights_lines(final)) if final.weights_before else "")
        click.echo(f"{final.status}: {final.reason}")
        return exit_code_for(final.status)
    click.echo(failure, err=True)
    return EXIT_ROLLED_BACK


async def last_change(client: Any, service: str, region: str, environment: str) -> EvacuationState | None:
    """The newest finished traffic change of this region that changed something (refusals changed nothing)."""
    from temporalio.client import WorkflowExecutionStatus

    query = (f"WorkflowType = 'EvacuationWorkflow' AND BifrostService = '{service}' "
             f"AND BifrostStage = '{region}/{environment}'")
    async for wf in client.list_workflows(query):
        if wf.status == WorkflowExecutionStatus.RUNNING:
            continue
        state, _ = await traffic_outcome(client.get_workflow_handle(wf.id, run_id=wf.run_id, result_type=EvacuationState))
        if state is None or state.status == "refused" or (state.direction == "restore" and state.status != "restored"):
            continue  # changed nothing, or a restore that did not finish: the evacuation before it still applies
        return state
    return None


def home_from(moves: list[EvacuationState | None], environment: str) -> dict[str, int] | None:
    """The home weights (no region evacuated) while the last traffic change left some region evacuated, else None.

    An evacuation records them; passing them on lets the next evacuation, and the restores after it, know each
    region's share before any evacuation, so restoring every region gives those weights back."""
    for state in reversed(moves):
        if state is None or state.environment != environment or not state.home_weights:
            continue
        now = state.weights_after or state.weights_now
        return dict(state.home_weights) if now and now != state.home_weights else None
    return None


async def run_evacuate(inp: EvacuationInput, *, wait: bool, task_queue: str) -> int:
    """Start an evacuation, handing it the home weights when another region is still evacuated."""
    from worker.connect import connect

    client = await connect()
    if await running_change(client, inp, task_queue):  # refused at once: never wait for it to end and then drain a second region
        await refuse_busy(client, inp.service)
    home = home_from(await traffic_moves(client, inp.service), inp.environment)
    if home is not None:
        inp = inp.model_copy(update={"home_weights": home})
        click.echo(f"another region is still evacuated: home weights {home}")
    return await run_traffic(inp, wait=wait, task_queue=task_queue)


async def run_restore(service: str, region: str, environment: str, *, who: str, reason: str, wait: bool,
                      task_queue: str) -> int:
    from worker.connect import connect

    client = await connect()
    last = await last_change(client, service, region, environment)
    if last is None:
        _fail(f"refused, nothing was changed: no evacuation of {region} ({service}, {environment}) found to restore "
              f"from; `bifrost traffic status {service}` shows the last traffic change", EXIT_INVALID)
        return EXIT_INVALID
    if last.direction == "restore":
        _fail(f"refused, nothing was changed: {region} was already restored by {last.workflow_id} "
              f"({last.ended_at:%Y-%m-%d %H:%M} UTC); nothing to restore", EXIT_INVALID)
    try:
        inp = last.restore_input(requested_by=who, reason=reason)
    except ValueError as err:
        _fail(f"refused, nothing was changed: {err}", EXIT_INVALID)
        return EXIT_INVALID
    click.echo(f"restoring from the evacuation that ended {last.ended_at:%Y-%m-%d %H:%M} UTC ({last.status}): "
               f"weights {inp.restore_to.weights if inp.restore_to else {}}")
    return await run_traffic(inp, wait=wait, task_queue=task_queue)


async def show_status(service: str, as_json: bool) -> int:
    from worker.connect import connect
    from workflows.evacuation.workflow import EvacuationWorkflow

    client = await connect()
    handle = client.get_workflow_handle(evacuation_id(service))

    async def read() -> EvacuationState:
        # an aborted evacuation started by hand ended Canceled: its memo holds its final state, no worker needed
        state = await canceled_outcome(handle, EvacuationState)
        if state is None:
            state = await handle.query(EvacuationWorkflow.status)
        return state

    state = await read_state(handle, read)
    if isinstance(state, NoState):  # e.g. the last run failed on invalid input: one line, no traceback
        click.echo(state.line, err=True)
        return state.code
    if as_json:
        click.echo(state.model_dump_json(indent=2))
        return EXIT_OK
    print_state(state)
    click.echo("audit trail:")
    print_audit(state)
    await echo_current_link(client, handle)
    return EXIT_OK


async def send(service: str, update: str, payload: BaseModel, *, workflow_id: str | None = None) -> int:
    """Send a validated update to the service's traffic workflow (or `workflow_id`); a refusal exits 1 saying why."""
    from temporalio.client import WorkflowUpdateFailedError

    from worker.connect import connect
    from workflows.rollout.updates import Ack

    client = await connect()
    handle = client.get_workflow_handle(workflow_id or evacuation_id(service))
    try:
        ack = await handle.execute_update(update, payload, result_type=Ack)
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        _fail(f"{update} refused: {getattr(cause, 'message', None) or cause or err}", EXIT_ROLLED_BACK)
    click.echo(ack.message)
    return EXIT_OK


# -- commands -------------------------------------------------------------------------------------
def _common(f: Any) -> Any:
    f = click.option("--task-queue", default="bifrost", show_default=True)(f)
    f = click.option("--as", "who", default=_identity, show_default="$BIFROST_USER or your login",
                     help="who asks (recorded in the audit trail)")(f)
    f = click.option("--env", "environment", type=click.Choice(["prod", "test"]), default="prod", show_default=True)(f)
    return f


@click.command(epilog=TRAFFIC_EXIT_CODES)
@click.argument("region")
@click.option("--service", required=True, help="the service whose traffic moves")
@click.option("--to", "receivers", help="receiving regions, comma-separated (default: every other region serving)")
@click.option("--steps", help="REGION's weight in percent of its home share (its share with no region evacuated) after each step (default 67,33,0)")
@click.option("--headroom", type=float, help="pre-warm receivers to replicas x new/old share x this (default 1.2)")
@click.option("--no-prewarm", is_flag=True, help="shift without scaling the receivers first")
@click.option("--health-interval", type=int, help="seconds between health samples (default 5); each step waits for 10 of them")
@click.option("--reason", default="", help="why (recorded in the audit trail and shown in the UI)")
@click.option("--require-approval", is_flag=True, help="plan, then wait for `bifrost traffic approve` before changing anything")
@click.option("--approver", "approvers", multiple=True, help="who may approve (repeatable; default: anyone)")
@click.option("--wait", is_flag=True, help="follow every step to the end; the exit code tells the outcome")
@_common
def evacuate(region: str, service: str, receivers: str | None, steps: str | None, headroom: float | None, no_prewarm: bool,
             health_interval: int | None, reason: str, require_approval: bool, approvers: tuple[str, ...], wait: bool, task_queue: str, who: str,
             environment: str) -> None:
    """Move REGION's traffic to the other regions: pre-warm them, then shift the weighted DNS records step by step.

    Before anything changes, the worker checks the live record set and workloads and refuses an unknown
    region, the last serving region, a missing record, bad steps, or a receiver that would need more than
    its max_replicas. After each step it waits at least the record's TTL, then judges the receivers
    against their own pre-shift metrics; an alarm reverts to the last healthy step.

    \b
    Examples:
      bifrost evacuate eu-west-1 --service payments --reason "INC-42: eu-west-1 latency" --wait
      bifrost evacuate eu-west-1 --service payments --to us-east-1,ap-south-1 --steps 30,10,0
      bifrost evacuate us-east-1 --service payments --steps 50 --require-approval --approver alice
    Then: bifrost traffic status payments | pause | resume | abort   and later   bifrost restore eu-west-1 --service payments
    """
    inp = _input({
        "service": service, "region": region, "environment": environment, "direction": "evacuate", "requested_by": who,
        "reason": reason, "receivers": [r.strip() for r in receivers.split(",") if r.strip()] if receivers else None,
        "steps": _csv_ints(steps), "headroom": headroom, "prewarm": not no_prewarm, "require_approval": require_approval,
        "approvers": list(approvers) or None, "health_interval_seconds": health_interval,
    })
    sys.exit(_run(run_evacuate(inp, wait=wait, task_queue=task_queue)))


@click.command(epilog=TRAFFIC_EXIT_CODES)
@click.argument("region")
@click.option("--service", required=True)
@click.option("--reason", default="", help="why (default: the evacuation's reason)")
@click.option("--wait", is_flag=True, help="follow every step to the end; the exit code tells the outcome")
@_common
def restore(region: str, service: str, reason: str, wait: bool, task_queue: str, who: str, environment: str) -> None:
    """Bring REGION's traffic back to where the last evacuation found it, then scale the receivers back down.

    The weights and replica counts to return to come from the last evacuation's result. The same levels
    are walked back (67,33,0 returns through 33, 67, 100%), each after the TTL and a health check of REGION.

    \b
    Examples:
      bifrost restore eu-west-1 --service payments --wait
      bifrost restore eu-west-1 --service payments --reason "INC-42 fixed"
    """
    sys.exit(_run(run_restore(service, region, environment, who=who, reason=reason, wait=wait, task_queue=task_queue)))


@click.group(epilog=TRAFFIC_EXIT_CODES)
def traffic() -> None:
    """Watch and steer a running evacuation or restore (one per service: workflow id traffic/<service>).

    \b
    Examples:
      bifrost traffic status payments
      bifrost traffic pause payments --reason "looking at the receivers"
      bifrost traffic resume payments
      bifrost traffic abort payments --reason "wrong region"          # puts weights and replicas back
      bifrost traffic abort payments --reason "stop here" --keep      # leaves traffic where it is
      bifrost traffic approve payments --comment "go"
    """


@traffic.command("status")
@click.argument("service")
@click.option("--json", "as_json", is_flag=True, help="print the status query's JSON")
def status_cmd(service: str, as_json: bool) -> None:
    """Show the service's current or last evacuation: weights, replicas, steps, audit trail."""
    sys.exit(_run(show_status(service, as_json)))


def _by(f: Any) -> Any:
    return click.option("--as", "who", default=_identity, show_default="$BIFROST_USER or your login")(f)


@traffic.command("pause")
@click.argument("service")
@click.option("--reason", default="")
@_by
def pause_cmd(service: str, reason: str, who: str) -> None:
    """Hold before the next step (the running step and its TTL wait finish)."""
    from workflows.rollout.updates import Pause

    sys.exit(_run(send(service, "pause", Pause(by=who, reason=reason))))


@traffic.command("resume")
@click.argument("service")
@_by
def resume_cmd(service: str, who: str) -> None:
    """Continue a paused evacuation or restore."""
    from workflows.rollout.updates import Resume

    sys.exit(_run(send(service, "resume", Resume(by=who))))


@traffic.command("abort")
@click.argument("service")
@click.option("--reason", required=True)
@click.option("--keep", is_flag=True, help="leave traffic and replicas where they are (default: put them back)")
@_by
def abort_cmd(service: str, reason: str, keep: bool, who: str) -> None:
    """Stop now; by default put the weights and replicas back as they were before."""
    from workflows.evacuation.models import AbortShift

    sys.exit(_run(send(service, "abort", AbortShift(by=who, reason=reason, revert=not keep))))


@traffic.command("approve")
@click.argument("service")
@click.option("--comment", default="")
@_by
def approve_cmd(service: str, comment: str, who: str) -> None:
    """Let an evacuation that waits for approval start changing traffic."""
    from workflows.evacuation.models import ApproveShift

    sys.exit(_run(send(service, "approve", ApproveShift(approver=who, comment=comment))))
