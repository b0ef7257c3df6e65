"""The worker process: connect from the environment, build adapters, run until SIGTERM/SIGINT.

Several such processes on one task queue: worker/processes.py (`bifrost worker --processes N`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from pathlib import Path

from temporalio.service import RPCError

from activities.adapters.registry import AdapterRegistry, registry_from_targets, report_store_from_config
from activities.adapters.reports import LocalReportStore, NoReports, ReportStore
from activities.adapters.simulated import FleetScenario, SimulatedFleet
from activities.adapters.targets import TargetsFile, load_targets
from worker.build import build_worker
from worker.connect import connect
from worker.limits import WorkerLimits
from worker.logs import JsonFormatter, setup_logging
from worker.reports_http import ReportServer
from worker.telemetry import telemetry as worker_telemetry
from worker.versioning import DEFAULT_DEPLOYMENT, deployment_config, deployment_version, settle_current

__all__ = ["JsonFormatter", "LoopWatch", "build_fleet", "build_registry", "run_worker", "setup_logging"]


class LoopWatch:
    """How long the event loop was blocked: a 100 ms timer that fires late was held up by code running on the loop
    (a CPU-bound async activity) or by a machine without a free core. While the loop is blocked, no workflow task
    or activity of this process moves, and a workflow task held past its 10 s timeout is lost."""

    INTERVAL = 0.1
    WARN_AFTER = 1.0  # s blocked at once
    WARN_EVERY = 60.0  # s between warnings

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self.blocked = 0.0
        self.longest = 0.0
        self.started = time.monotonic()
        self._warned_at = -self.WARN_EVERY
        self._unreported = 0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(self.INTERVAL)
            lag = loop.time() - before - self.INTERVAL
            self.blocked += max(0.0, lag)
            self.longest = max(self.longest, lag)
            if lag >= self.WARN_AFTER:
                self._unreported += 1
                if loop.time() - self._warned_at >= self.WARN_EVERY:
                    self.log.warning(
                        f"event loop blocked for {lag:.1f} s ({self._unreported} time(s) over {self.WARN_AFTER:g} s since the "
                        "last warning): CPU-bound code on the loop or no free core; workflow tasks may time out. "
                        "Run more processes (--processes) or lower --max-activities.")
                    self._warned_at, self._unreported = loop.time(), 0

    def summary(self) -> str:
        up = time.monotonic() - self.started
        return f"event loop blocked {self.blocked:.1f} s of {up:.0f} s, longest {self.longest:.1f} s"


DEFAULT_FLEET_DB = Path(".bifrost/fleet.db")


def build_fleet(fleet_file: str | None, fleet_db: str | Path = DEFAULT_FLEET_DB) -> SimulatedFleet:
    """The simulated fleet: the scenario from `fleet_file` (else 60 samples per window), its state in `fleet_db`."""
    scenario = FleetScenario.load(fleet_file) if fleet_file else FleetScenario(min_samples=60)
    return SimulatedFleet(scenario, state_file=fleet_db)


def build_registry(fleet: SimulatedFleet, targets: TargetsFile | None) -> AdapterRegistry:
    """Adapters from a targets file when given; the simulated fleet serves everything else.

    When the fleet deploys anywhere, its state file is opened now, so a bad path stops the worker at start-up;
    a worker whose targets never use it creates no file (its root filesystem may be read-only)."""
    registry = registry_from_targets(targets, fleet=fleet) if targets is not None else AdapterRegistry.simulated(fleet)
    if registry.default_deployer is fleet or any(d is fleet for d in registry.deployers.values()):
        fleet.open()
    return registry


class ReportsOptionError(ValueError):
    """Worker report options that contradict each other or the targets file, or a reports port that is taken."""


def report_store(targets: TargetsFile | None, *, reports_dir: str | Path | None = None, serve: bool = False,
                 served_url: str | None = None, reports_url: str | None = None) -> ReportStore:
    """The store the worker's options and targets file describe.

    `reports_dir` overrides the file's folder. When the folder is served (`serve`), links use `reports_url`,
    else the file's `public_base_url`, else `served_url` (where the worker's HTTP server answers)."""
    config = targets.reports if targets else None
    if reports_url is not None and not reports_url.startswith(("http://", "https://")):
        raise ReportsOptionError(f"--reports-url must start with http:// or https://, got {reports_url!r}")
    if config is not None and config.kind == "s3":
        if serve or reports_url is not None:
            raise ReportsOptionError("--reports-port/--reports-url serve the local reports folder, but the targets "
                                     "file stores reports in S3 (reports.kind: s3); drop those options")
        return report_store_from_config(config, targets.aws if targets else None)
    if reports_url is not None and not serve:
        raise ReportsOptionError("--reports-url names where --reports-port serves the folder; give --reports-port too")
    return report_store_from_config(config, local_dir=reports_dir, local_base_url=reports_url or served_url,
                                    prefer_local_base_url=reports_url is not None)


async def run_worker(
    *, task_queue: str = "bifrost", fleet_file: str | None = None, targets_file: str | None = None,
    reports_dir: str | Path | None = None, reports_port: int | None = None, reports_host: str = "127.0.0.1",
    reports_url: str | None = None, render_processes: int = 1, fleet_db: str | Path = DEFAULT_FLEET_DB,
    limits: WorkerLimits | None = None, no_reports: bool = False, metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1", otlp_endpoint: str | None = None, log_format: str = "json",
    trace_sample_ratio: float | None = None, deployment: str = DEFAULT_DEPLOYMENT, build_id: str | None = None,
    versioned: bool = True, set_current: bool = False,
) -> None:
    """Run until SIGINT/SIGTERM, then shut down gracefully (in-flight activities get 30 s).

    With `reports_port` (0: any free port), the local reports folder is also served read-only over HTTP;
    with `no_reports`, no report is drawn and verdicts carry no link. With `metrics_port` (0: any free port),
    Prometheus metrics are served on it; with `otlp_endpoint`, traces are sent there (worker/telemetry.py).
    `versioned` (the default): it polls as build `build_id` of Worker Deployment `deployment` and becomes current when
    `set_current` or when the deployment has no current build (worker/versioning.py, docs/versioning.md)."""
    from worker.versioning import default_build_id

    version = deployment_version(deployment, build_id or default_build_id()) if versioned else None
    targets = load_targets(targets_file) if targets_file else None
    serve = reports_port is not None
    if no_reports and (serve or reports_dir or reports_url):
        raise ReportsOptionError("--no-reports draws no reports: leave out --reports, --reports-port and --reports-url")
    store: ReportStore = (NoReports() if no_reports
                          else report_store(targets, reports_dir=reports_dir, serve=serve, reports_url=reports_url))
    setup_logging(log_format=log_format)
    log = logging.getLogger("bifrost.worker")
    telemetry = worker_telemetry(metrics_port=metrics_port, metrics_host=metrics_host, otlp_endpoint=otlp_endpoint,
                                 trace_sample_ratio=trace_sample_ratio)
    fleet = build_fleet(fleet_file, fleet_db)
    registry = build_registry(fleet, targets)
    server = None
    if serve and isinstance(store, LocalReportStore):
        try:
            server = ReportServer(store.root, host=reports_host, port=reports_port or 0).start()
        except OSError as err:
            raise ReportsOptionError(f"cannot serve reports on {reports_host}:{reports_port}: {err.strerror}; "
                                     "choose another --reports-port") from err
        store = report_store(targets, reports_dir=reports_dir, serve=True, served_url=server.url, reports_url=reports_url)
    limits = limits or WorkerLimits()
    watch = LoopWatch(log)
    watching: asyncio.Task[None] | None = None
    try:
        client = await connect(**telemetry.connect_kwargs())
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        watching = asyncio.create_task(watch.run())
        async with build_worker(client, registry, task_queue=task_queue, reports=store, render_processes=render_processes,
                                limits=limits, deployment=deployment_config(version) if version else None):
            log.info(f"worker started on task queue {task_queue!r} in namespace {client.namespace!r} "
                     f"(pid {os.getpid()}; at most {limits.workflow_tasks} workflow tasks, {limits.activities} activities, "
                     f"{limits.local_activities} local activities at once; {limits.cached_workflows} cached workflows; "
                     f"simulated fleet state in {fleet.where}; "
                     + (f"deployment {version.deployment_name!r}, build {version.build_id!r})" if version else "unversioned)"))
            if version is not None:
                try:
                    log.info(await settle_current(client, version, set_current=set_current))
                except RPCError as err:  # polling goes on; routing is for a person to fix (docs/versioning.md)
                    log.error(f"could not read or set the current version of deployment {version.deployment_name!r}: "
                              f"{err.message}; make build {version.build_id} current with the temporal CLI")
            if telemetry.metrics_url:
                log.info("serving Prometheus metrics (temporal_* and bifrost_*) on %s", telemetry.metrics_url)
            if telemetry.otlp_endpoint:
                log.info("sending traces over OTLP/HTTP to %s", telemetry.otlp_endpoint)
            if server is not None and isinstance(store, LocalReportStore):
                log.info("serving reports from %s on %s:%d; report links start with %s", server.root, reports_host,
                         server.port, store.base_url)
            await stop.wait()
            log.info("shutting down: finishing in-flight activities")
    finally:
        if watching is not None:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
        fleet.close()
        if server is not None:
            server.close()
    log.info(f"worker stopped; {watch.summary()}")
