"""`bifrost`: plan, submit, watch and steer staged multi-region rollouts on Temporal.

Every message is plain text (user text is never read as rich markup), every refusal is one line naming
the field, and the process leaves with `os._exit` once a command is done: the Temporal SDK's Rust threads
otherwise crash the interpreter's teardown now and then (SIGABRT after a correct result; docs/operating.md).
"""

from __future__ import annotations

import asyncio
import getpass
import logging
import os
import re
import signal
import sys
import traceback
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click
from pydantic import BaseModel, ValidationError
from rich.console import Console

from bifrost_cli.exits import EXIT_CODES_HELP, EXIT_INVALID, EXIT_ROLLED_BACK, EXIT_UNREACHABLE, REVERT_EXIT_CODES
from bifrost_cli.listed import listed_statuses, statuses_help
from bifrost_cli.render import console_width
from common.problems import FileProblems, shorten
from common.text import identity_problem
from common.types import DEFAULT_PROMOTE_HOLD_FLOOR_MINUTES, is_stage_key
from worker.limits import WorkerLimits
from workflows.plan import Plan, PlanError, build_plan
from workflows.request import (
    MAX_TEXT,
    MAX_WAVE,
    MAX_WHO,
    RequestError,
    RolloutRequest,
    load_request,
    promote_hold_floor_problem,
    promote_on_timeout_warning,
)

if TYPE_CHECKING:  # the Temporal SDK and the workflows load only in commands that talk to a server
    from rich.table import Table
    from temporalio.workflow import UpdateMethodMultiParam

    from workflows.rollout.workflow import RolloutWorkflow

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

# markup=False: a value or field name containing "[/red]" prints as written, never as a style tag
console = Console(markup=False, emoji=False, highlight=False, width=console_width(sys.stdout))
err_console = Console(stderr=True, markup=False, emoji=False, highlight=False, width=console_width(sys.stderr))

MAX_WORKFLOW_ID_BYTES = 1000  # Temporal's limit on a workflow id
_SERVICE = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?", re.ASCII)


def _fail(message: str, hint: str | None = None, code: int = EXIT_INVALID) -> NoReturn:
    """Print a refusal (plain text, never markup, never wrapped) and what to do next; exit with `code`."""
    click.echo(click.style(message, fg="red"), err=True)
    if hint:
        click.echo(hint, err=True)
    sys.exit(code)


_LIMITS = WorkerLimits()  # the defaults of `bifrost worker --max-*`


def _identity() -> str:
    """$BIFROST_USER, else the login name; '' when neither is known (the update commands then ask for --as)."""
    try:
        return os.environ.get("BIFROST_USER") or getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry (containers with an arbitrary uid)
        return ""


def _promote_hold_floor(targets_file: str | None) -> float:
    """The platform's floor on a hold that promotes on timeout: the targets file's, else the default."""
    if targets_file is None:
        return DEFAULT_PROMOTE_HOLD_FLOOR_MINUTES
    from activities.adapters.targets import load_targets

    try:
        return load_targets(targets_file).policy.min_promote_hold_minutes
    except FileProblems as err:
        _fail(str(err), "Nothing was deployed. Fix the targets file, or leave --targets out to check against the "
                        "default floors.")


def _router_problems(req: RolloutRequest, targets_file: str | None) -> list[str]:
    """Stages whose targets do not configure `canary.traffic.router` (none known without a targets file)."""
    if req.canary.traffic is None or targets_file is None:
        return []
    from activities.adapters.registry import registry_from_targets
    from activities.adapters.targets import load_targets
    from activities.routing import router_problems

    try:
        registry = registry_from_targets(load_targets(targets_file))
    except FileProblems as err:
        _fail(str(err), "Nothing was deployed. Fix the targets file, or leave --targets out.")
    stages = [(r.name, e) for r in req.regions for e in r.environments]
    return router_problems(registry, req.service, stages, req.canary.traffic.router)


def _load(path: str, targets_file: str | None = None) -> tuple[RolloutRequest, Plan]:
    """The request and its plan, refused (exit 2, one line per problem) unless the worker would run it: its fields,
    its plan, and the platform's floors (the targets file's `policy`; default floors without one)."""
    try:
        req = load_request(path)
        p = build_plan(req, now=datetime.now(UTC))
    except RequestError as err:
        _fail(str(err), "Nothing was deployed. Fix the fields above and try again.")
    except PlanError as err:
        what = "the deployment windows" if err.rule.startswith("regions.") else "the blast-radius rules cannot all be met"
        _fail(f"invalid request {shorten(path, 300)}: {what}:\n  - {err}", "Nothing was deployed.")
    problem = promote_hold_floor_problem(req, _promote_hold_floor(targets_file))
    if problem is not None:
        where = f"the floors in {shorten(targets_file, 300)}" if targets_file else "the default floors (no --targets given)"
        _fail(f"invalid request {shorten(path, 300)}: below {where}:\n  - {problem}", "Nothing was deployed.")
    routers = _router_problems(req, targets_file)
    if routers:
        _fail(f"invalid request {shorten(path, 300)}: the canary router:\n" + "\n".join(f"  - {p}" for p in routers),
              "Nothing was deployed.")
    warning = promote_on_timeout_warning(req)
    if warning is not None:
        click.echo(click.style(warning, fg="red", bold=True), err=True)
    return req, p


_TARGETS_HELP = ("the worker's targets file: its `policy` floors are checked (default floors without it; the worker "
                 "checks its own file again)")


def _refusal(message: str) -> tuple[str, int]:
    """What to do about a request Temporal refused, and the exit code, by what it refused."""
    text = message.lower()
    if any(k in text for k in ("size", "too large", "larger than", "exceeds limit", "exceeds the limit")):
        return ("The payload is larger than Temporal accepts: shorten the texts you gave (--reason, --comment) "
                "or the request file.", EXIT_INVALID)
    if "workflowid" in text or "workflow id" in text or "workflow_id" in text:
        return "Temporal does not accept that rollout id: check it with `bifrost list`.", EXIT_INVALID
    if "search attribute" in text:
        return ("Register Bifrost's search attributes on the namespace (`bifrost server` does this for a dev server; "
                "see docs/operating.md).", EXIT_ROLLED_BACK)
    if "namespace" in text:
        return "Check TEMPORAL_NAMESPACE (and TEMPORAL_ADDRESS / TEMPORAL_API_KEY).", EXIT_ROLLED_BACK
    if "poller" in text or "no worker" in text:
        return "No worker polls the task queue: start one with `bifrost worker`.", EXIT_ROLLED_BACK
    return "Check the command's arguments (`bifrost COMMAND --help`).", EXIT_ROLLED_BACK


def _run(coro: Coroutine[Any, Any, T], subject: str = "ROLLOUT_ID") -> T:
    """Run a client coroutine; turn what Temporal answers into a one-line reason and an exit code (`subject`: the
    workflow it acts on, for the hint)."""
    from temporalio.service import RPCError, RPCStatusCode

    address = os.environ.get("TEMPORAL_ADDRESS", "localhost:7233")
    hint = "Start one with `bifrost server`, or set TEMPORAL_ADDRESS / TEMPORAL_NAMESPACE / TEMPORAL_API_KEY."
    try:
        return asyncio.run(coro)
    except RPCError as err:
        reason = shorten(err.message or (err.status.name if err.status else str(err)), 400)
        if err.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.UNAUTHENTICATED):
            _fail(f"could not reach Temporal at {address}: {reason}", hint, EXIT_UNREACHABLE)
        if err.status == RPCStatusCode.NOT_FOUND and "already completed" in reason:
            _fail(f"{subject} has already ended: {reason}", f"Nothing was changed. `bifrost status {subject}` shows how "
                  "it ended; `bifrost list` shows the ones still running.", EXIT_ROLLED_BACK)
        if err.status == RPCStatusCode.NOT_FOUND:
            _fail(f"not found: {reason}", _not_found_hint(subject), EXIT_ROLLED_BACK)
        what_to_do, code = _refusal(reason)
        _fail(f"Temporal refused the request: {reason}", what_to_do, code)
    except RuntimeError as err:
        if "connect" not in str(err).lower():
            raise
        _fail(f"could not reach Temporal at {address}: {shorten(str(err), 400)}", hint, EXIT_UNREACHABLE)


def _exit_status(code: object) -> int:
    """SystemExit's code as a process exit status (None is 0; a message is printed and gives 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    click.echo(str(code), err=True)
    return 1


def _leave(code: int) -> NoReturn:
    """Flush and leave without interpreter teardown, where the Temporal SDK's Rust threads can crash the process."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed pipe (`bifrost list | head`) must not change the exit code
            pass
    logging.shutdown()
    os._exit(code)


class _Bifrost(click.Group):
    """The command group; `judge` is loaded only when used (it needs scipy and matplotlib: seconds to import)."""

    _lazy = {"judge": ("bifrost_cli.judge_cmd", "judge")}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self._lazy and cmd_name not in self.commands:
            import importlib

            module, attr = self._lazy[cmd_name]
            try:
                command = getattr(importlib.import_module(module), attr)
            except ImportError:
                return None
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        """The console script: run the command, then leave with its exact exit code (CliRunner calls main())."""
        try:
            self.main(*args, **kwargs)
            code = 0
        except SystemExit as done:
            code = _exit_status(done.code)
        except BaseException:  # a bug: show it, and still exit with a code rather than a crash
            traceback.print_exc()
            code = 1
        _leave(code)


@click.group(cls=_Bifrost, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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
@click.argument("file")
@click.option("--targets", "targets_file", envvar="BIFROST_TARGETS", type=click.Path(exists=True, dir_okay=False),
              help=_TARGETS_HELP + "  [env: BIFROST_TARGETS]")
def plan(file: str, targets_file: str | None) -> None:
    """Validate a request FILE (YAML or JSON) and print its waves; needs no server."""
    req, p = _load(file, targets_file)
    console.print(_plan_table(req, p))
    console.print(f"rollback scope: {req.rollback_scope}; on conflict: {req.on_conflict}; "
                  f"workflow id: {req.workflow_id}")


def _plan_table(req: RolloutRequest, p: Plan) -> Table:
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
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops the server too, never orphans it
    try:
        srv.process.wait()
    except KeyboardInterrupt:
        srv.stop()
        return
    if srv.process.returncode != 0:  # it died by itself (a port taken, a broken database file)
        _fail(f"the Temporal dev server exited with code {srv.process.returncode}", "See .bifrost/temporal.log.", 1)


@cli.command()
@click.option("--task-queue", default="bifrost", show_default=True)
@click.option("--fleet", "fleet_file", type=click.Path(exists=True, dir_okay=False),
              help="simulated fleet scenario (YAML) for stages without real targets")
@click.option("--targets", "targets_file", type=click.Path(exists=True, dir_okay=False),
              help="targets file selecting Kubernetes / Prometheus / CloudWatch per region and environment")
@click.option("--reports", default=None, metavar="DIR",
              help="folder canary reports are written to  [default: the targets file's reports.dir, else .bifrost/reports]")
@click.option("--reports-port", type=click.IntRange(0, 65535), default=None, metavar="PORT",
              help="also serve the reports folder read-only over HTTP on this port, so report links open in a browser")
@click.option("--reports-host", default="127.0.0.1", show_default=True, help="address the reports port listens on")
@click.option("--reports-url", default=None, metavar="URL",
              help="public URL of the served folder, for links  [default: http://127.0.0.1:PORT]")
@click.option("--render-processes", type=click.IntRange(1, 64), default=1, show_default=True,
              help="processes that draw reports, beside the worker's own")
@click.option("--no-reports", is_flag=True,
              help="draw no canary reports (verdicts carry no link): saves a core's worth of drawing on busy hosts")
@click.option("--fleet-db", default=".bifrost/fleet.db", show_default=True, type=click.Path(dir_okay=False),
              help="SQLite file holding the simulated fleet's state (which version runs where); it survives "
                   "restarts, and workers given the same file share one fleet. Delete it to start afresh")
@click.option("--processes", type=click.IntRange(min=1), default=1, show_default=True,
              help="worker processes on this task queue; one per core to use more than one core")
@click.option("--max-workflow-tasks", type=click.IntRange(min=2), default=_LIMITS.workflow_tasks, show_default=True,
              help="workflow tasks one process runs at once")
@click.option("--max-activities", type=click.IntRange(min=1), default=_LIMITS.activities, show_default=True,
              help="activities one process runs at once")
@click.option("--max-local-activities", type=click.IntRange(min=1), default=_LIMITS.local_activities, show_default=True,
              help="local activities (version reads) one process runs at once")
@click.option("--max-cached-workflows", type=click.IntRange(min=1), default=_LIMITS.cached_workflows, show_default=True,
              help="workflows one process keeps in memory between tasks (sticky cache)")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None, metavar="PORT",
              help="serve Prometheus metrics (Temporal's temporal_* and Bifrost's bifrost_*) at http://HOST:PORT/metrics")
@click.option("--metrics-host", default="127.0.0.1", show_default=True,
              help="address the metrics port listens on (0.0.0.0 in a pod, for Prometheus to scrape)")
@click.option("--otlp-endpoint", envvar="OTEL_EXPORTER_OTLP_ENDPOINT", default=None, metavar="URL",
              help="send OpenTelemetry traces over OTLP/HTTP to URL, e.g. http://otel-collector:4318  "
                   "[default: $OTEL_EXPORTER_OTLP_ENDPOINT; none: no tracing]")
@click.option("--trace-sample-ratio", type=click.FloatRange(0, 1), default=None, metavar="RATIO",
              help="share of rollouts traced, each whole or not at all  [default: $OTEL_TRACES_SAMPLER(_ARG), else all]")
@click.option("--log-format", type=click.Choice(["json", "text"]), default="json", show_default=True,
              help="one line per event on stderr: a JSON object, or text for humans")
@click.option("--deployment", default="bifrost", show_default=True, metavar="NAME",
              help="Worker Deployment this worker belongs to (docs/versioning.md)")
@click.option("--build-id", default=None, metavar="ID",
              help="this build's id within the deployment  [default: the installed bifrost version]")
@click.option("--set-current", is_flag=True,
              help="make this build the deployment's current version at start-up: new workflows go to it, running "
                   "ones stay on the build that started them (a deployment with no current version gets this build "
                   "without the flag)")
@click.option("--unversioned", is_flag=True,
              help="poll without Worker Versioning (no deployment, no pinning): for a dev server shared with "
                   "unversioned workers only")
def worker(task_queue: str, fleet_file: str | None, targets_file: str | None, reports: str | None,
           reports_port: int | None, reports_host: str, reports_url: str | None, render_processes: int,
           no_reports: bool, fleet_db: str, processes: int, max_workflow_tasks: int, max_activities: int, max_local_activities: int,
           max_cached_workflows: int, metrics_port: int | None, metrics_host: str, otlp_endpoint: str | None,
           trace_sample_ratio: float | None, log_format: str, deployment: str, build_id: str | None, set_current: bool,
           unversioned: bool) -> None:
    """Run a worker: executes rollouts and their activities. Stop with Ctrl-C or SIGTERM (graceful).

    With --processes N, N worker processes poll the same task queue and Temporal spreads the work over
    them; SIGTERM or Ctrl-C is passed to all of them. The limits apply to each process.

    The worker runs as build --build-id of Worker Deployment --deployment: each workflow stays on the build that
    started it. Deploy a new build beside the old one, make it current (--set-current), and stop the old one once it
    has drained (docs/versioning.md).
    """
    limits = {"--max-workflow-tasks": max_workflow_tasks, "--max-activities": max_activities,
              "--max-local-activities": max_local_activities, "--max-cached-workflows": max_cached_workflows}
    if processes > 1:
        if reports_port is not None:
            raise click.UsageError("--reports-port serves one process's reports; with --processes, store reports in "
                                   "S3 (reports: {kind: s3} in the targets file) or run one process per port")
        if metrics_port is not None:
            raise click.UsageError("--metrics-port serves one process's metrics; with --processes, run one process per "
                                   "pod (raise the replicas instead) so that each is scraped on its own port")
        from worker.processes import exec_supervisor

        child = [sys.executable, "-m", "bifrost_cli.main", "worker", "--task-queue", task_queue, "--fleet-db", fleet_db,
                 "--render-processes", str(render_processes),
                 *(arg for flag, value in limits.items() for arg in (flag, str(value)))]
        child += ["--reports", reports] if reports else []
        child += ["--no-reports"] if no_reports else []
        child += ["--fleet", fleet_file] if fleet_file else []
        child += ["--targets", targets_file] if targets_file else []
        child += ["--log-format", log_format, "--deployment", deployment]
        child += ["--build-id", build_id] if build_id else []
        child += ["--set-current"] if set_current else []
        child += ["--unversioned"] if unversioned else []
        child += ["--otlp-endpoint", otlp_endpoint] if otlp_endpoint else []
        child += ["--trace-sample-ratio", str(trace_sample_ratio)] if trace_sample_ratio is not None else []
        exec_supervisor(processes, child)  # does not return

    from activities.adapters.base import AdapterError
    from worker.main import ReportsOptionError, run_worker
    from worker.telemetry import TelemetryOptionError
    from worker.versioning import VersioningOptionError

    try:
        _run(run_worker(task_queue=task_queue, fleet_file=fleet_file, targets_file=targets_file, reports_dir=reports,
                        reports_port=reports_port, reports_host=reports_host, reports_url=reports_url,
                        render_processes=render_processes, no_reports=no_reports, fleet_db=fleet_db,
                        metrics_port=metrics_port, metrics_host=metrics_host, otlp_endpoint=otlp_endpoint,
                        log_format=log_format, trace_sample_ratio=trace_sample_ratio,
                        limits=WorkerLimits(workflow_tasks=max_workflow_tasks, activities=max_activities,
                                            local_activities=max_local_activities, cached_workflows=max_cached_workflows),
                        deployment=deployment, build_id=build_id, versioned=not unversioned, set_current=set_current))
    except (ReportsOptionError, TelemetryOptionError, VersioningOptionError) as err:
        raise click.UsageError(str(err)) from None
    except AdapterError as err:  # e.g. the fleet state file cannot be opened: say so, without a traceback
        _fail(f"worker not started: {err}", "Fix the file named above, or point --fleet-db at another one.")
    except FileProblems as err:
        _fail(str(err), "The worker did not start. Fix the fields above and try again.")


# -- rollouts --------------------------------------------------------------------------------------
@cli.command(epilog=EXIT_CODES_HELP)
@click.argument("file")
@click.option("--wait", is_flag=True, help="wait for the outcome; the exit code tells it")
@click.option("--follow", is_flag=True, help="show a live table of waves and stages until the end (implies --wait)")
@click.option("--task-queue", default="bifrost", show_default=True)
@click.option("--targets", "targets_file", envvar="BIFROST_TARGETS", type=click.Path(exists=True, dir_okay=False),
              help=_TARGETS_HELP + "  [env: BIFROST_TARGETS]")
def submit(file: str, wait: bool, follow: bool, task_queue: str, targets_file: str | None) -> None:
    """Submit a request FILE. Re-submitting the same service and version attaches to the running rollout."""
    from bifrost_cli import ops
    from worker.telemetry import TelemetryOptionError, client_telemetry

    req, _ = _load(file, targets_file)
    try:
        telemetry = client_telemetry()  # the rollout's trace starts here when OTEL_EXPORTER_OTLP_ENDPOINT is set
    except TelemetryOptionError as err:
        _fail(str(err), "Unset it, or set it to your OTLP/HTTP collector, e.g. http://otel-collector:4318.")
    code = _run(ops.submit(req, wait=wait or follow, follow=follow, task_queue=task_queue, console=console,
                           connect_kwargs=telemetry.connect_kwargs()))
    sys.exit(code)


@cli.command()
@click.argument("rollout_id")
@click.option("--json", "as_json", is_flag=True, help="print the status query's JSON")
def status(rollout_id: str, as_json: bool) -> None:
    """Show a rollout's stages, versions, verdicts, pending approvals and audit trail.

    ROLLOUT_ID is the workflow id, e.g. rollout/payments/2.4.0 (the 'rollout/' prefix may be left out),
    or a revert's, e.g. revert/payments/1.9.0 (`bifrost revert`).
    """
    from bifrost_cli import ops

    if rollout_id.startswith("revert/") and _text_problem(rollout_id) is None and rollout_id.isprintable():
        from bifrost_cli.revert import show_revert

        sys.exit(_run(show_revert(rollout_id, as_json=as_json)))
    rid = _rid(rollout_id)
    sys.exit(_run(ops.show_status(rid, as_json=as_json, console=console), subject=rid))


@cli.command("report-link")
@click.argument("link")
@click.option("--targets", "targets_file", required=True, type=click.Path(exists=True, dir_okay=False),
              help="the worker's targets file (its reports and aws sections)")
@click.option("--expires", type=click.IntRange(60, 7 * 24 * 3600), default=3600, show_default=True,
              help="seconds the link works")
def report_link(link: str, targets_file: str, expires: int) -> None:
    """Print a fresh presigned HTTPS link for an S3 report (LINK: the `s3://bucket/key` a verdict shows).

    Reports in S3 are named by object address in histories, chat and `status`, never by a presigned URL,
    which carries an access key id and session token; this signs one with the credentials the targets file
    names, in this shell's environment, for whoever asked.
    """
    from activities.adapters.base import AdapterError
    from activities.adapters.registry import report_store_from_config
    from activities.adapters.reports import S3ReportStore
    from activities.adapters.targets import load_targets

    try:
        targets = load_targets(targets_file)
    except FileProblems as err:
        _fail(str(err), "Fix the fields above and try again.")
    store = report_store_from_config(targets.reports, targets.aws)
    if not isinstance(store, S3ReportStore):
        _fail(f"{targets_file} keeps reports in a local folder: its links open as they are",
              "report-link signs links of reports: {kind: s3} stores only.")
    try:
        click.echo(store.presign(link, expires))
    except AdapterError as err:
        _fail(str(err))


@cli.command("list")
@click.option("--service", help="only this service")
@click.option("--status", "status_", type=click.Choice(listed_statuses()), metavar="STATUS", help=statuses_help())
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 10_000))
def list_(service: str | None, status_: str | None, limit: int) -> None:
    """List rollouts and reverts, newest first (uses the BifrostService / BifrostStatus search attributes)."""
    from bifrost_cli import ops

    if service is not None and not (len(service) <= 63 and _SERVICE.fullmatch(service)):
        _fail(f"--service: {shorten(repr(service), 80)} is not a service name (lower-case letters, digits and dashes)")
    _run(ops.list_rollouts(service=service, status=status_, limit=limit, console=console))


def _text_problem(value: str) -> str | None:
    """Why `value` cannot travel to Temporal as text: bytes that are not UTF-8 reach Python as surrogates."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid UTF-8 text"
    return None


def _rid(rollout_id: str) -> str:
    """The workflow id (`rollout/` added when left out), refused here if Temporal could not take it."""
    rid = rollout_id if rollout_id.startswith("rollout/") else f"rollout/{rollout_id}"
    problem = _text_problem(rid)
    if problem is None and (not rollout_id.strip() or not rid.isprintable()):
        problem = "must be printable text on one line, e.g. rollout/payments/2.4.0"
    if problem is None and len(rid.encode()) > MAX_WORKFLOW_ID_BYTES:
        problem = f"is {len(rid.encode())} bytes long; Temporal's workflow ids are at most {MAX_WORKFLOW_ID_BYTES}"
    if problem:
        _fail(f"ROLLOUT_ID: {shorten(repr(rollout_id), 80)} {problem}", "`bifrost list` shows rollouts and their ids.")
    return rid


def _not_found_hint(subject: str) -> str:
    """What to do about an id Temporal does not know: a stage's (or its report's) id names its rollout in its first
    three parts, since a service or version never holds a '/'; stages run in the machinery namespace."""
    parts = subject.split("/")
    if parts[0] != "rollout" or len(parts) < 5:
        return "`bifrost list` shows rollouts and their ids."
    owner, stage = "/".join(parts[:3]), "/".join(parts[3:5])
    return (f"If it is stage {stage} of {owner} (stages run in the machinery namespace and are steered through their "
            f"rollout): `bifrost status {owner}`, and `--stage {stage}` where a command takes one. `bifrost list` "
            "shows rollouts and their ids.")


def _by_option(f: F) -> F:
    return click.option("--as", "who", default=_identity, show_default="$BIFROST_USER or your login",
                        help="identity recorded in the audit trail")(f)


# what the user typed, for each payload field
_OPTION = {"by": "--as", "approver": "--as", "reason": "--reason", "comment": "--comment", "stage": "--stage",
           "wave": "--wave", "scope": "--scope", "action": "--action"}


def _local_problems(name: str, fields: dict[str, Any], model: type[BaseModel]) -> list[str]:
    """What the workflow or Temporal would refuse, checked before anything is sent."""
    out = []
    for field, value in fields.items():
        option = _OPTION.get(field, field)
        if isinstance(value, str):
            problem = _text_problem(value)
            limit = MAX_WHO if field in ("by", "approver") else MAX_TEXT
            if problem:
                out.append(f"{option}: {problem}")
            elif field in ("by", "approver") and not value.strip():
                out.append(f"{option}: give your name with --as NAME or set BIFROST_USER")
            elif field == "reason" and not value.strip() and model.model_fields["reason"].is_required():
                out.append(f"{option}: must not be empty; say why")
            elif len(value) > limit:
                out.append(f"{option}: {len(value)} characters; at most {limit} are allowed")
            elif field in ("by", "approver") and (who := identity_problem(value)):
                out.append(f"{option}: {who}")
            elif field == "stage" and not is_stage_key(value):
                out.append(f"{option}: {shorten(repr(value), 60)} is not a stage; write region/env, e.g. eu-west-1/prod")
        elif field == "wave" and value is not None and not 1 <= value <= MAX_WAVE:
            out.append(f"{option}: {value} is not a wave; waves are numbered from 1 (see `bifrost status`)")
    if name in ("approve", "reject") and (fields.get("stage") is None) == (fields.get("wave") is None):
        out.append("--stage/--wave: give exactly one of --stage region/env or --wave N")
    return out


def _update(rollout_id: str, update: UpdateMethodMultiParam[[RolloutWorkflow, Any], Any], model: type[BaseModel],
            fields: dict[str, Any], command: str | None = None) -> NoReturn:
    """Build the update's payload from the options (refusing bad values here, naming the field), then send it
    through the workflow's own update method."""
    from bifrost_cli import ops
    from common.problems import joined, payload_problems

    name = getattr(update, "__name__", "update")
    rid = _rid(rollout_id)
    problems = _local_problems(name, fields, model)
    payload: BaseModel | None = None
    try:
        payload = model.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as err:
        named = {q.split(":")[0] for q in problems}
        problems += [p for p in map(_as_option, payload_problems(err, model)) if p.split(":")[0] not in named]
    if problems or payload is None:
        _fail(f"{name} not sent: {joined(problems)}",
              f"Nothing was changed. See `bifrost {command or name.replace('_', '-')} --help`.")
    ok = _run(ops.send_update(rid, update, payload, console=console, err_console=err_console), subject=rid)
    sys.exit(0 if ok else EXIT_ROLLED_BACK)


def _as_option(problem: str) -> str:
    """`reason: ...` from the payload model becomes `--reason: ...`, the name the user typed."""
    field, sep, rest = problem.partition(":")
    return f"{_OPTION.get(field, field)}{sep}{rest}"


@cli.command()
@click.argument("rollout_id")
@click.option("--stage", help="gate of a stage, e.g. eu-west-1/prod")
@click.option("--wave", type=int, help="gate of a wave (1-based)")
@click.option("--comment", default="", help="why it is fine to go on")
@_by_option
def approve(rollout_id: str, stage: str | None, wave: int | None, comment: str, who: str) -> None:
    """Approve a pending gate so the rollout may go on."""
    from workflows.rollout.updates import Approve
    from workflows.rollout.workflow import RolloutWorkflow  # the update by reference: checked, and followed by an IDE

    _update(rollout_id, RolloutWorkflow.approve, Approve, {"stage": stage, "wave": wave, "approver": who, "comment": comment})


@cli.command()
@click.argument("rollout_id")
@click.option("--stage")
@click.option("--wave", type=int)
@click.option("--reason", required=True)
@_by_option
def reject(rollout_id: str, stage: str | None, wave: int | None, reason: str, who: str) -> None:
    """Reject a pending gate: the rollout rolls back by its rollback scope."""
    from workflows.rollout.updates import Reject
    from workflows.rollout.workflow import RolloutWorkflow  # the update by reference: checked, and followed by an IDE

    _update(rollout_id, RolloutWorkflow.reject, Reject, {"stage": stage, "wave": wave, "approver": who, "reason": reason})


@cli.command()
@click.argument("rollout_id")
@click.option("--reason", default="")
@_by_option
def pause(rollout_id: str, reason: str, who: str) -> None:
    """Hold the rollout at the next safe point (before a wave or a promotion). Soaks keep their clock."""
    from workflows.rollout.updates import Pause
    from workflows.rollout.workflow import RolloutWorkflow  # the update by reference: checked, and followed by an IDE

    _update(rollout_id, RolloutWorkflow.pause, Pause, {"by": who, "reason": reason})


@cli.command()
@click.argument("rollout_id")
@_by_option
def resume(rollout_id: str, who: str) -> None:
    """Continue a paused rollout."""
    from workflows.rollout.updates import Resume
    from workflows.rollout.workflow import RolloutWorkflow  # the update by reference: checked, and followed by an IDE

    _update(rollout_id, RolloutWorkflow.resume, Resume, {"by": who})


@cli.command()
@click.argument("rollout_id")
@click.option("--reason", required=True)
@_by_option
def abort(rollout_id: str, reason: str, who: str) -> None:
    """Stop the rollout and roll back by the request's rollback scope."""
    from workflows.rollout.updates import Abort
    from workflows.rollout.workflow import RolloutWorkflow  # the update by reference: checked, and followed by an IDE

    _update(rollout_id, RolloutWorkflow.abort, Abort, {"by": who, "reason": reason})


@cli.command()
@click.argument("rollout_id")
@click.option("--reason", required=True)
@click.option("--scope", type=click.Choice(["stage", "region", "all"]), help="default: the request's rollback scope")
@click.option("--stage", help="a stage held on failure: roll it back (then the rollout, by the request's scope)")
@_by_option
def rollback(rollout_id: str, reason: str, scope: str | None, stage: str | None, who: str) -> None:
    """Stop and roll back with an explicit scope; with --stage, decide a hold on failure by rolling back.

    \b
    bifrost rollback payments/2.4.0 --reason "errors up" --scope all
    bifrost rollback payments/2.4.0 --stage eu-west-1/prod --reason "the canary is really slower"
    """
    from workflows.rollout.updates import ResolveHold, Rollback
    from workflows.rollout.workflow import RolloutWorkflow  # the update by reference: checked, and followed by an IDE

    if stage is None:
        _update(rollout_id, RolloutWorkflow.rollback, Rollback, {"by": who, "reason": reason, "scope": scope})
    if scope is not None:
        _fail("rollback not sent: --scope: a held stage rolls back by the request's rollback scope; leave out --stage "
              "to stop the whole rollout with a scope of your choice", "Nothing was changed.")
    _update(rollout_id, RolloutWorkflow.resolve_hold, ResolveHold,
            {"stage": stage, "action": "rollback", "by": who, "reason": reason}, command="rollback")


_HOLD_EPILOG = ("A stage holds on failure when its region has `on_failure: hold` and its canary fails its analysis: "
                "canary and baseline keep running and the rollout waits. Decide with `bifrost retry`, `bifrost "
                "promote` or `bifrost rollback --stage`; `bifrost status ROLLOUT` shows what holds. Only names on the "
                "request's approvals.approvers may decide (when it lists any). Without a decision the hold takes "
                "the request's hold.on_timeout after hold.timeout_minutes.")


@cli.command(epilog=_HOLD_EPILOG)
@click.argument("rollout_id")
@click.option("--stage", required=True, help="the held stage, e.g. eu-west-1/prod")
@click.option("--reason", default="", help="why (recorded in the audit trail)")
@_by_option
def retry(rollout_id: str, stage: str, reason: str, who: str) -> None:
    """Judge a stage held on failure again, on a fresh analysis window begun now (the old samples are not reused).

    \b
    bifrost retry payments/2.4.0 --stage eu-west-1/prod --reason "metrics source fixed"
    """
    from workflows.rollout.updates import ResolveHold
    from workflows.rollout.workflow import RolloutWorkflow  # the update by reference: checked, and followed by an IDE

    _update(rollout_id, RolloutWorkflow.resolve_hold, ResolveHold,
            {"stage": stage, "action": "retry", "by": who, "reason": reason}, command="retry")


@cli.command(epilog=_HOLD_EPILOG)
@click.argument("rollout_id")
@click.option("--stage", required=True, help="the held stage, e.g. eu-west-1/prod")
@click.option("--reason", required=True, help="why the failed canary may go on anyway (required; audited)")
@_by_option
def promote(rollout_id: str, stage: str, reason: str, who: str) -> None:
    """Promote a stage held on failure despite its failed analysis; the rollout goes on.

    \b
    bifrost promote payments/2.4.0 --stage eu-west-1/prod --reason "latency is the new cache warming; accepted"
    """
    from workflows.rollout.updates import ResolveHold
    from workflows.rollout.workflow import RolloutWorkflow  # the update by reference: checked, and followed by an IDE

    _update(rollout_id, RolloutWorkflow.resolve_hold, ResolveHold,
            {"stage": stage, "action": "promote", "by": who, "reason": reason}, command="promote")


@cli.command("resolve-hold", epilog=_HOLD_EPILOG)
@click.argument("rollout_id")
@click.option("--stage", required=True, help="the held stage, e.g. eu-west-1/prod")
@click.option("--action", required=True, type=click.Choice(["retry", "promote", "rollback"]),
              help="retry: judge again on a fresh window; promote or rollback: a reason is required")
@click.option("--reason", default="", help="why (required for promote and rollback; audited)")
@_by_option
def resolve_hold(rollout_id: str, stage: str, action: str, reason: str, who: str) -> None:
    """Decide on a stage held on failure (what retry, promote and rollback --stage send)."""
    from workflows.rollout.updates import ResolveHold
    from workflows.rollout.workflow import RolloutWorkflow  # the update by reference: checked, and followed by an IDE

    _update(rollout_id, RolloutWorkflow.resolve_hold, ResolveHold,
            {"stage": stage, "action": action, "by": who, "reason": reason}, command="resolve-hold")


@cli.command("skip-soak")
@click.argument("rollout_id")
@click.option("--stage", required=True)
@click.option("--reason", required=True)
@_by_option
def skip_soak(rollout_id: str, stage: str, reason: str, who: str) -> None:
    """End a running stage's soak now."""
    from workflows.rollout.updates import SkipSoak
    from workflows.rollout.workflow import RolloutWorkflow  # the update by reference: checked, and followed by an IDE

    _update(rollout_id, RolloutWorkflow.skip_soak, SkipSoak, {"stage": stage, "by": who, "reason": reason})


@cli.command("override-window")
@click.argument("rollout_id")
@click.option("--stage", required=True)
@click.option("--reason", required=True)
@_by_option
def override_window(rollout_id: str, stage: str, reason: str, who: str) -> None:
    """Let a stage start outside its deployment window."""
    from workflows.rollout.updates import OverrideWindow
    from workflows.rollout.workflow import RolloutWorkflow  # the update by reference: checked, and followed by an IDE

    _update(rollout_id, RolloutWorkflow.override_window, OverrideWindow, {"stage": stage, "by": who, "reason": reason})


@cli.command(epilog=REVERT_EXIT_CODES)
@click.argument("service")
@click.option("--to", "to_version", required=True, metavar="VERSION",
              help="the version to go back to: one the release replaced, or one an earlier rollout succeeded with")
@click.option("--reason", required=True, help="why (the audit trail, the Web UI, notices)")
@click.option("--evacuate", is_flag=True, help="move each production region's traffic away before its deploy, back after")
@click.option("--queue", is_flag=True,
              help="while a rollout of SERVICE runs, wait for it to end and then undo it  [default: refuse, naming it]")
@click.option("--release", metavar="ROLLOUT_ID", help="the rollout to undo  [default: the latest finished one of SERVICE]")
@click.option("--stage", "stages", multiple=True, metavar="REGION/ENV",
              help="only this stage of the release (repeatable)  [default: every stage]")
@click.option("--image", help="the image of VERSION, for deployers that kept no template of it (Kubernetes)")
@click.option("--health-minutes", type=float, help="each region's health window  [default: the release's "
                                                   "evacuation.health_check_minutes]")
@click.option("--wait", is_flag=True, help="follow it to the end; the exit code tells the outcome")
@click.option("--as", "who", default=_identity, show_default="$BIFROST_USER or your login", help="who asks (recorded in the audit trail)")
@click.option("--task-queue", default="bifrost", show_default=True)
def revert(service: str, to_version: str, reason: str, evacuate: bool, queue: bool, release: str | None,
           stages: tuple[str, ...], image: str | None, health_minutes: float | None, wait: bool, who: str,
           task_queue: str) -> None:
    """Undo a finished release: put SERVICE back on VERSION in every region it changed, the last wave first.

    No canary and no soak (VERSION ran in production before): each region is deployed, then its primary
    is judged against its own window from just before the revert, so it takes the deploys plus the health
    checks. An unhealthy region stops the revert there; the message says which regions still run the
    release. It takes the service lock like a rollout: while a rollout of SERVICE runs it is refused,
    naming that rollout, unless --queue. Anything that does not fit the release (unknown service, a
    VERSION the service did not run before it, a stage it does not have) is refused before any deploy.

    \b
    Examples:
      bifrost revert payments --to 1.9.0 --reason "INC-42: 2.0.0 corrupts receipts" --wait
      bifrost revert payments --to 1.9.0 --reason "INC-42" --evacuate --queue
      bifrost revert payments --to 1.9.0 --reason "eu only" --stage eu-west-1/prod --stage eu-west-1/test
    Then: bifrost status revert/payments/1.9.0   (pause, resume, abort: the Web UI's Update menu)
    """
    from bifrost_cli.revert import revert_input, run_revert

    inp = revert_input({
        "service": service, "to_version": to_version, "requested_by": who, "reason": reason, "evacuate": evacuate,
        "on_conflict": "queue" if queue else "reject", "release": release, "stages": list(stages) or None,
        "image": image, "health_minutes": health_minutes,
    })
    sys.exit(_run(run_revert(inp, wait=wait, task_queue=task_queue)))


@cli.command()
@click.option("--port", default=7233, show_default=True)
@click.option("--ui-port", default=8233, show_default=True)
@click.option("--keep", is_flag=True, help="keep the server running after the demo (Ctrl-C to stop)")
def demo(port: int, ui_port: int, keep: bool) -> None:
    """Start a server and worker, run a good rollout and a regressing one, and check both outcomes."""
    from bifrost_cli.demo import run_demo

    sys.exit(run_demo(port=port, ui_port=ui_port, keep=keep, console=console))


def _register_traffic() -> None:
    from bifrost_cli.drill import drill
    from bifrost_cli.guard import guard
    from bifrost_cli.traffic import evacuate, restore, traffic

    for command in (evacuate, restore, traffic, guard, drill):
        cli.add_command(command)


_register_traffic()

if __name__ == "__main__":  # pragma: no cover
    cli()


