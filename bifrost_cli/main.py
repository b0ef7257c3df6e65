"""`bifrost`: plan, submit, watch and steer staged multi-region rollouts on Temporal."""

from __future__ import annotations

import asyncio
import getpass
import os
import sys
from typing import TYPE_CHECKING, Any

import click
from pydantic import BaseModel, ValidationError
from rich.console import Console

from bifrost_cli.exits import EXIT_CODES_HELP, EXIT_INVALID, EXIT_ROLLED_BACK, EXIT_UNREACHABLE
from workflows.plan import Plan, PlanError, build_plan
from workflows.request import RequestError, RolloutRequest, load_request

if TYPE_CHECKING:  # the Temporal SDK is imported only by commands that talk to a server
    from temporalio.workflow import UpdateMethodMultiParam

    from workflows.rollout import RolloutWorkflow

console = Console()
err_console = Console(stderr=True)


def _identity() -> str:
    return os.environ.get("BIFROST_USER") or getpass.getuser()


def _load(path: str) -> tuple[RolloutRequest, Plan]:
    try:
        req = load_request(path)
        return req, build_plan(req)
    except RequestError as err:
        err_console.print(f"[red]{err}[/red]\nNothing was deployed. Fix the fields above and try again.")
        sys.exit(EXIT_INVALID)
    except PlanError as err:
        err_console.print(f"[red]invalid request {path}: the blast-radius rules cannot all be met:\n  - {err}[/red]")
        sys.exit(EXIT_INVALID)


def _run(coro: Any) -> Any:
    """Run a client coroutine; turn connection failures into exit code 4 with what to do next."""
    from temporalio.service import RPCError, RPCStatusCode

    address = os.environ.get("TEMPORAL_ADDRESS", "localhost:7233")
    hint = "Start one with `bifrost server`, or set TEMPORAL_ADDRESS / TEMPORAL_NAMESPACE / TEMPORAL_API_KEY."
    try:
        return asyncio.run(coro)
    except RPCError as err:
        if err.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.UNAUTHENTICATED):
            err_console.print(f"[red]could not reach Temporal at {address}: {err.message}[/red]\n{hint}")
            sys.exit(EXIT_UNREACHABLE)
        if err.status == RPCStatusCode.NOT_FOUND:
            err_console.print(f"[red]not found: {err.message}[/red]\n`bifrost list` shows rollouts and their ids.")
        else:
            err_console.print(f"[red]Temporal refused the request: {err.message}[/red]\n"
                              "Is a `bifrost worker` running, and were the search attributes registered "
                              "(`bifrost server` does this)?")
        sys.exit(EXIT_ROLLED_BACK)
    except RuntimeError as err:
        if "connect" not in str(err).lower():
            raise
        err_console.print(f"[red]could not reach Temporal at {address}: {err}[/red]\n{hint}")
        sys.exit(EXIT_UNREACHABLE)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option("0.1.0", prog_name="bifrost")
def cli() -> None:
    """Staged, multi-region rollouts with canary analysis, driven by Temporal.

    \b
    Typical flow:
      bifrost plan deploy/examples/request.yaml      # check a request, see its waves
      bifrost server &                               # local Temporal + Web UI on :8233
      bifrost worker &                               # runs rollouts (simulated fleet by default)
      bifrost submit deploy/examples/request.yaml --follow
      bifrost approve rollout/payments/2.4.0 --stage us-east-1/prod

    Connection settings come from TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY,
    TEMPORAL_TLS* and TEMPORAL_PROFILE, like the `temporal` CLI.
    """


# -- offline ---------------------------------------------------------------------------------------
@cli.command()
@click.argument("file", type=click.Path(dir_okay=False))
def plan(file: str) -> None:
    """Validate a request FILE (YAML or JSON) and print its waves; needs no server."""
    req, p = _load(file)
    console.print(_plan_table(req, p))
    console.print(f"rollback scope: {req.rollback_scope}; on conflict: {req.on_conflict}; "
                  f"workflow id: {req.workflow_id}")


def _plan_table(req, p):
    from bifrost_cli.render import plan_table

    return plan_table(req, p)


# -- processes -------------------------------------------------------------------------------------
@cli.command()
@click.option("--port", default=7233, show_default=True, help="gRPC port")
@click.option("--ui-port", default=8233, show_default=True, help="Web UI port")
@click.option("--db", default=".bifrost/temporal.db", show_default=True, help="SQLite file; survives restarts")
def server(port: int, ui_port: int, db: str) -> None:
    """Run the embedded Temporal dev server with its Web UI and Bifrost's search attributes."""
    from worker.server import start_dev_server

    srv = start_dev_server(port=port, ui_port=ui_port, db_file=db, log_file=".bifrost/temporal.log")
    console.print(f"Temporal on {srv.address}; Web UI {srv.ui_url}; data in {db}. Ctrl-C stops it.")
    try:
        srv.process.wait()
    except KeyboardInterrupt:
        srv.stop()


@cli.command()
@click.option("--task-queue", default="bifrost", show_default=True)
@click.option("--fleet", "fleet_file", type=click.Path(exists=True, dir_okay=False),
              help="simulated fleet scenario (YAML) for stages without real targets")
@click.option("--targets", "targets_file", type=click.Path(exists=True, dir_okay=False),
              help="targets file selecting Kubernetes / Prometheus / CloudWatch per region and environment")
@click.option("--reports", default=".bifrost/reports", show_default=True, help="where canary reports are written")
def worker(task_queue: str, fleet_file: str | None, targets_file: str | None, reports: str) -> None:
    """Run a worker: executes rollouts and their activities. Stop with Ctrl-C (graceful)."""
    from worker.main import run_worker

    _run(run_worker(task_queue=task_queue, fleet_file=fleet_file, targets_file=targets_file, reports_dir=reports))


# -- rollouts --------------------------------------------------------------------------------------
@cli.command(epilog=EXIT_CODES_HELP)
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--wait", is_flag=True, help="wait for the outcome; the exit code tells it")
@click.option("--follow", is_flag=True, help="show a live table of waves and stages until the end (implies --wait)")
@click.option("--task-queue", default="bifrost", show_default=True)
def submit(file: str, wait: bool, follow: bool, task_queue: str) -> None:
    """Submit a request FILE. Re-submitting the same service and version attaches to the running rollout."""
    from bifrost_cli import ops

    req, _ = _load(file)
    code = _run(ops.submit(req, wait=wait or follow, follow=follow, task_queue=task_queue, console=console))
    sys.exit(code)


@cli.command()
@click.argument("rollout_id")
@click.option("--json", "as_json", is_flag=True, help="print the status query's JSON")
def status(rollout_id: str, as_json: bool) -> None:
    """Show a rollout's stages, versions, verdicts, pending approvals and audit trail.

    ROLLOUT_ID is the workflow id, e.g. rollout/payments/2.4.0 (the 'rollout/' prefix may be left out).
    """
    from bifrost_cli import ops

    _run(ops.show_status(_rid(rollout_id), as_json=as_json, console=console))


@cli.command("list")
@click.option("--service", help="only this service")
@click.option("--status", "status_", help="only this Bifrost status, e.g. running, awaiting_approval, rolled_back")
@click.option("--limit", default=20, show_default=True)
def list_(service: str | None, status_: str | None, limit: int) -> None:
    """List rollouts, newest first (uses the BifrostService / BifrostStatus search attributes)."""
    from bifrost_cli import ops

    _run(ops.list_rollouts(service=service, status=status_, limit=limit, console=console))


def _rid(rollout_id: str) -> str:
    return rollout_id if rollout_id.startswith("rollout/") else f"rollout/{rollout_id}"


def _by_option(f):
    return click.option("--as", "who", default=_identity, show_default="$BIFROST_USER or your login",
                        help="identity recorded in the audit trail")(f)


def _update(rollout_id: str, update: UpdateMethodMultiParam[[RolloutWorkflow, Any], Any], model: type[BaseModel],
            fields: dict[str, Any]) -> None:
    """Build the update's payload from the options (refusing bad values here, naming the field), then send it."""
    from bifrost_cli import ops
    from workflows.updates import payload_problems

    try:
        payload = model.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as err:
        err_console.print(f"[red]{getattr(update, '__name__', 'update')} not sent: {'; '.join(payload_problems(err))}[/red]")
        sys.exit(EXIT_INVALID)
    ok = _run(ops.send_update(_rid(rollout_id), update, payload, console=console, err_console=err_console))
    sys.exit(0 if ok else 1)


@cli.command()
@click.argument("rollout_id")
@click.option("--stage", help="gate of a stage, e.g. eu-west-1/prod")
@click.option("--wave", type=int, help="gate of a wave (1-based)")
@click.option("--comment", default="", help="why it is fine to go on")
@_by_option
def approve(rollout_id: str, stage: str | None, wave: int | None, comment: str, who: str) -> None:
    """Approve a pending gate so the rollout may go on."""
    from workflows.rollout import RolloutWorkflow
    from workflows.updates import Approve

    _update(rollout_id, RolloutWorkflow.approve, Approve, {"stage": stage, "wave": wave, "approver": who, "comment": comment})


@cli.command()
@click.argument("rollout_id")
@click.option("--stage")
@click.option("--wave", type=int)
@click.option("--reason", required=True)
@_by_option
def reject(rollout_id: str, stage: str | None, wave: int | None, reason: str, who: str) -> None:
    """Reject a pending gate: the rollout rolls back by its rollback scope."""
    from workflows.rollout import RolloutWorkflow
    from workflows.updates import Reject

    _update(rollout_id, RolloutWorkflow.reject, Reject, {"stage": stage, "wave": wave, "approver": who, "reason": reason})


@cli.command()
@click.argument("rollout_id")
@click.option("--reason", default="")
@_by_option
def pause(rollout_id: str, reason: str, who: str) -> None:
    """Hold the rollout at the next safe point (before a wave or a promotion). Soaks keep their clock."""
    from workflows.rollout import RolloutWorkflow
    from workflows.updates import Pause

    _update(rollout_id, RolloutWorkflow.pause, Pause, {"by": who, "reason": reason})


@cli.command()
@click.argument("rollout_id")
@_by_option
def resume(rollout_id: str, who: str) -> None:
    """Continue a paused rollout."""
    from workflows.rollout import RolloutWorkflow
    from workflows.updates import Resume

    _update(rollout_id, RolloutWorkflow.resume, Resume, {"by": who})


@cli.command()
@click.argument("rollout_id")
@click.option("--reason", required=True)
@_by_option
def abort(rollout_id: str, reason: str, who: str) -> None:
    """Stop the rollout and roll back by the request's rollback scope."""
    from workflows.rollout import RolloutWorkflow
    from workflows.updates import Abort

    _update(rollout_id, RolloutWorkflow.abort, Abort, {"by": who, "reason": reason})


@cli.command()
@click.argument("rollout_id")
@click.option("--reason", required=True)
@click.option("--scope", type=click.Choice(["stage", "region", "all"]), help="default: the request's rollback scope")
@_by_option
def rollback(rollout_id: str, reason: str, scope: str | None, who: str) -> None:
    """Stop and roll back with an explicit scope."""
    from workflows.rollout import RolloutWorkflow
    from workflows.updates import Rollback

    _update(rollout_id, RolloutWorkflow.rollback, Rollback, {"by": who, "reason": reason, "scope": scope})


@cli.command("skip-soak")
@click.argument("rollout_id")
@click.option("--stage", required=True)
@click.option("--reason", required=True)
@_by_option
def skip_soak(rollout_id: str, stage: str, reason: str, who: str) -> None:
    """End a running stage's soak now."""
    from workflows.rollout import RolloutWorkflow
    from workflows.updates import SkipSoak

    _update(rollout_id, RolloutWorkflow.skip_soak, SkipSoak, {"stage": stage, "by": who, "reason": reason})


@cli.command("override-window")
@click.argument("rollout_id")
@click.option("--stage", required=True)
@click.option("--reason", required=True)
@_by_option
def override_window(rollout_id: str, stage: str, reason: str, who: str) -> None:
    """Let a stage start outside its deployment window."""
    from workflows.rollout import RolloutWorkflow
    from workflows.updates import OverrideWindow

    _update(rollout_id, RolloutWorkflow.override_window, OverrideWindow, {"stage": stage, "by": who, "reason": reason})


@cli.command()
@click.option("--port", default=7233, show_default=True)
@click.option("--ui-port", default=8233, show_default=True)
@click.option("--keep", is_flag=True, help="keep the server running after the demo (Ctrl-C to stop)")
def demo(port: int, ui_port: int, keep: bool) -> None:
    """Start a server and worker, run a good rollout and a regressing one, and check both outcomes."""
    from bifrost_cli.demo import run_demo

    sys.exit(run_demo(port=port, ui_port=ui_port, keep=keep, console=console))


def _register_optional() -> None:
    try:
        from bifrost_cli.judge_cmd import judge as judge_cmd
    except ImportError:
        return
    cli.add_command(judge_cmd)


_register_optional()


def _register_traffic() -> None:
    from bifrost_cli.traffic import evacuate, restore, traffic

    for command in (evacuate, restore, traffic):
        cli.add_command(command)


_register_traffic()

if __name__ == "__main__":  # pragma: no cover
    cli()


