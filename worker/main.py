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

from activities.adapters.registry import AdapterRegistry, registry_from_targets
from activities.adapters.simulated import FleetScenario, SimulatedFleet
from activities.adapters.targets import load_targets
from worker.build import build_worker
from worker.connect import connect
from worker.limits import WorkerLimits
from worker.logs import JsonFormatter, setup_logging

__all__ = ["JsonFormatter", "LoopWatch", "build_registry", "run_worker", "setup_logging"]


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


def build_registry(fleet_file: str | None, targets_file: str | None) -> AdapterRegistry:
    """Adapters from a targets file when given; the simulated fleet serves everything else."""
    fleet = SimulatedFleet(FleetScenario.load(fleet_file) if fleet_file else FleetScenario(min_samples=60))
    if targets_file:
        return registry_from_targets(load_targets(targets_file), fleet=fleet)
    return AdapterRegistry.simulated(fleet)


async def run_worker(
    *, task_queue: str = "bifrost", fleet_file: str | None = None, targets_file: str | None = None,
    reports_dir: str | Path = ".bifrost/reports", limits: WorkerLimits | None = None,
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
    limits = limits or WorkerLimits()
    watch = LoopWatch(log)
    watching = asyncio.create_task(watch.run())
    try:
        async with build_worker(client, registry, task_queue=task_queue, reports_dir=reports_dir, limits=limits):
            log.info(f"worker started on task queue {task_queue!r} in namespace {client.namespace!r} "
                     f"(pid {os.getpid()}; at most {limits.workflow_tasks} workflow tasks, {limits.activities} activities, "
                     f"{limits.local_activities} local activities at once; {limits.cached_workflows} cached workflows)")
            await stop.wait()
            log.info("shutting down: finishing in-flight activities")
    finally:
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
    log.info(f"worker stopped; {watch.summary()}")
