"""The worker process: connect from the environment, build adapters, run until SIGTERM/SIGINT.

`supervise` runs several such processes on one task queue: one Python process uses one core, and more
workers polling the same task queue is how Temporal spreads rollouts (deploy/README.md, "Scaling out").
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from activities.adapters.registry import AdapterRegistry, registry_from_targets
from activities.adapters.simulated import FleetScenario, SimulatedFleet
from activities.adapters.targets import load_targets
from worker.build import build_worker
from worker.connect import connect
from worker.limits import WorkerLimits


class JsonFormatter(logging.Formatter):
    """One JSON object per line, with Temporal's workflow/activity context when present."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
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
    async with build_worker(client, registry, task_queue=task_queue, reports_dir=reports_dir, limits=limits):
        log.info(f"worker started on task queue {task_queue!r} in namespace {client.namespace!r} "
                 f"(pid {os.getpid()}; at most {limits.workflow_tasks} workflow tasks, {limits.activities} activities, "
                 f"{limits.local_activities} local activities at once; {limits.cached_workflows} cached workflows)")
        await stop.wait()
        log.info("shutting down: finishing in-flight activities")
    log.info("worker stopped")


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: get SIGTERM if the supervisor dies (even by SIGKILL), so no worker is orphaned."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the supervisor's own signal forwarding still applies
        pass


def supervise(commands: Sequence[Sequence[str]]) -> int:
    """Run one worker process per command until SIGTERM/SIGINT, which is forwarded to all; return an exit code.

    If a worker exits on its own, the others are stopped too and its exit code is returned, so that the
    process manager (Kubernetes, systemd) restarts the whole set instead of leaving it quietly short of one.
    """
    setup_logging()
    log = logging.getLogger("bifrost.worker")
    stopping = False
    procs: dict[int, subprocess.Popen[bytes]] = {}

    def stop_all(signum: int | None = None, frame: FrameType | None = None) -> None:
        nonlocal stopping
        stopping = True
        for proc in procs.values():
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)

    previous = {sig: signal.signal(sig, stop_all) for sig in (signal.SIGTERM, signal.SIGINT)}
    code = 0
    try:
        for command in commands:
            if stopping:
                break
            proc = subprocess.Popen(list(command), preexec_fn=_die_with_parent)  # safe: this process has no threads
            procs[proc.pid] = proc
        if stopping:  # a signal that came while the last child was being started
            stop_all()
        log.info(f"supervisor (pid {os.getpid()}) started {len(procs)} worker processes: {sorted(procs)}")
        while any(p.returncode is None for p in procs.values()):
            try:
                pid, status = os.wait()
            except ChildProcessError:  # reaped elsewhere: nothing left to wait for
                break
            exited = procs.get(pid)
            if exited is None:
                continue
            exited.returncode = returned = os.waitstatus_to_exitcode(status)
            if not stopping:
                log.error(f"worker process {pid} exited with {returned}; stopping the others")
                code = returned if returned > 0 else 1
                stop_all()
            elif returned not in (0, -signal.SIGTERM) and code == 0:
                code = returned if returned > 0 else 1
    finally:
        for proc in procs.values():  # only reached with live children on an error in this loop
            if proc.returncode is None:
                proc.kill()
                proc.wait()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    log.info(f"supervisor stopped: all {len(procs)} worker processes have exited")
    return code
