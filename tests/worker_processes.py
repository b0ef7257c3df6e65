"""`bifrost worker` processes for the tests that kill one mid-run: started against the test's dev server, each
logging to its own file, waited on with a deadline that fails early (with their logs) when one dies."""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from temporalio.client import Client

BIFROST = str(Path(sys.executable).parent / "bifrost")


class WorkerProcesses:
    """`bifrost worker --task-queue <task_queue> <args>` processes; `start(name)` runs one more, logging to
    `<tmp>/<name>.log`. The environment is the test's, pointed at `client`'s server and namespace."""

    def __init__(self, client: Client, task_queue: str, tmp: Path, *args: str) -> None:
        self.argv = [BIFROST, "worker", "--task-queue", task_queue, *args]
        self.tmp = tmp
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
        self.env |= {"TEMPORAL_ADDRESS": client.service_client.config.target_host, "TEMPORAL_NAMESPACE": client.namespace}
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []
        self.killed: set[int] = set()

    def start(self, name: str) -> subprocess.Popen[bytes]:
        self.logs.append(self.tmp / f"{name}.log")
        with self.logs[-1].open("wb") as out:
            self.procs.append(subprocess.Popen(self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT))
        return self.procs[-1]

    def kill(self, proc: subprocess.Popen[bytes]) -> int:
        """SIGKILL `proc` (no longer watched by `until`); its exit code once it is gone."""
        self.killed.add(proc.pid)
        proc.send_signal(signal.SIGKILL)
        return proc.wait(timeout=30)

    def tail(self) -> str:
        """The last 3,000 characters of each worker's log."""
        return "\n".join(f"--- {log.name}\n{log.read_text()[-3000:]}" for log in self.logs if log.exists())

    async def until(self, what: str, condition: Callable[[], object], timeout: float) -> None:
        """Poll `condition` (sync or async) every 0.1 s; fail naming `what` (with the logs) on timeout, or as soon
        as a worker this test did not kill has exited."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return
            dead = [p.args for p in self.procs if p.pid not in self.killed and p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise AssertionError(f"{'a worker exited' if dead else 'timed out'} waiting for {what}\n{self.tail()}")
            await asyncio.sleep(0.1)

    def stop(self) -> None:
        """Stop every worker still running (SIGTERM, then SIGKILL after 40 s)."""
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=40)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
