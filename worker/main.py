"""The worker process: connect from the environment, build adapters, run until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import time
from pathlib import Path

from activities.adapters.registry import AdapterRegistry, registry_from_targets, report_store_from_config
from activities.adapters.reports import LocalReportStore, ReportStore
from activities.adapters.simulated import FleetScenario, SimulatedFleet
from activities.adapters.targets import TargetsFile, load_targets
from worker.build import build_worker
from worker.connect import connect
from worker.reports_http import ReportServer


class JsonFormatter(logging.Formatter):
    """One JSON object per line, with Temporal's workflow/activity context when present."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in ("temporal_workflow", "temporal_activity"):
            if hasattr(record, key):
                out[key] = getattr(record, key)
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def setup_logging(level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=level, handlers=[handler], force=True)


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
) -> None:
    """Run until SIGINT/SIGTERM, then shut down gracefully (in-flight activities get 30 s).

    With `reports_port` (0: any free port), the local reports folder is also served read-only over HTTP."""
    targets = load_targets(targets_file) if targets_file else None
    serve = reports_port is not None
    store = report_store(targets, reports_dir=reports_dir, serve=serve, reports_url=reports_url)  # checks the options
    setup_logging()
    log = logging.getLogger("bifrost.worker")
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
    try:
        client = await connect()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with build_worker(client, registry, task_queue=task_queue, reports=store, render_processes=render_processes):
            log.info("worker started; simulated fleet state in %s", fleet.where,
                     extra={"task_queue": task_queue, "namespace": client.namespace})
            if server is not None and isinstance(store, LocalReportStore):
                log.info("serving reports from %s on %s:%d; report links start with %s", server.root, reports_host,
                         server.port, store.base_url)
            await stop.wait()
            log.info("shutting down: finishing in-flight activities")
    finally:
        fleet.close()
        if server is not None:
            server.close()
    log.info("worker stopped")
