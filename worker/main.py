"""The worker process: connect from the environment, build adapters, run until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import time
from pathlib import Path

from activities.adapters.registry import AdapterRegistry, registry_from_targets
from activities.adapters.simulated import FleetScenario, SimulatedFleet
from activities.adapters.targets import load_targets
from worker.build import build_worker
from worker.connect import connect


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


def build_registry(fleet: SimulatedFleet, targets_file: str | None) -> AdapterRegistry:
    """Adapters from a targets file when given; the simulated fleet serves everything else.

    When the fleet deploys anywhere, its state file is opened now, so a bad path stops the worker at start-up;
    a worker whose targets never use it creates no file (its root filesystem may be read-only)."""
    registry = registry_from_targets(load_targets(targets_file), fleet=fleet) if targets_file \
        else AdapterRegistry.simulated(fleet)
    if registry.default_deployer is fleet or any(d is fleet for d in registry.deployers.values()):
        fleet.open()
    return registry


async def run_worker(
    *, task_queue: str = "bifrost", fleet_file: str | None = None, targets_file: str | None = None,
    reports_dir: str | Path = ".bifrost/reports", fleet_db: str | Path = DEFAULT_FLEET_DB,
) -> None:
    """Run until SIGINT/SIGTERM, then shut down gracefully (in-flight activities get 30 s)."""
    setup_logging()
    log = logging.getLogger("bifrost.worker")
    fleet = build_fleet(fleet_file, fleet_db)
    try:
        registry = build_registry(fleet, targets_file)
        client = await connect()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with build_worker(client, registry, task_queue=task_queue, reports_dir=reports_dir):
            log.info("worker started; simulated fleet state in %s", fleet.where,
                     extra={"task_queue": task_queue, "namespace": client.namespace})
            await stop.wait()
            log.info("shutting down: finishing in-flight activities")
    finally:
        fleet.close()
    log.info("worker stopped")
