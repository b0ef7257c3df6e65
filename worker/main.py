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


def build_registry(fleet_file: str | None, targets_file: str | None) -> AdapterRegistry:
    """Adapters from a targets file when given; the simulated fleet serves everything else."""
    fleet = SimulatedFleet(FleetScenario.load(fleet_file) if fleet_file else FleetScenario(min_samples=60))
    if targets_file:
        return registry_from_targets(load_targets(targets_file), fleet=fleet)
    return AdapterRegistry.simulated(fleet)


async def run_worker(
    *, task_queue: str = "bifrost", fleet_file: str | None = None, targets_file: str | None = None,
    reports_dir: str | Path = ".bifrost/reports",
) -> None:
    """Run until SIGINT/SIGTERM, then shut down gracefully (in-flight activities get 30 s)."""
    setup_logging()
    log = logging.getLogger("bifrost.worker")
    registry = build_registry(fleet_file, targets_file)
    client = await connect()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with build_worker(client, registry, task_queue=task_queue, reports_dir=reports_dir):
        log.info("worker started", extra={"task_queue": task_queue, "namespace": client.namespace})
        await stop.wait()
        log.info("shutting down: finishing in-flight activities")
    log.info("worker stopped")
