"""`bifrost worker --processes N`: N normal worker processes on one task queue, under one supervisor.

One Python process runs its workflow code and async activities on one core (the GIL), so a host with more
cores runs more processes, and Temporal spreads the task queue's work over every process that polls it
(deploy/README.md, "Scaling out"). Only the standard library here: the supervisor stays small.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from types import FrameType

from worker.logs import setup_logging

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


def exec_supervisor(processes: int, command: Sequence[str]) -> None:
    """Replace this process with a supervisor of `processes` copies of `command` (same pid, so signals still reach it).

    The supervisor imports only this module: the CLI's own imports (pydantic, numpy for `judge`) would cost
    every host more than 100 MB for a process that only waits for its children."""
    os.execv(sys.executable, [sys.executable, "-m", "worker.processes", str(processes), "--", *command])


def main(argv: Sequence[str]) -> int:
    """`python -m worker.processes N -- COMMAND...`: run N copies of COMMAND under `supervise`."""
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit() or int(argv[0]) < 1:
        print("usage: python -m worker.processes N -- COMMAND [ARG...]   (N >= 1)", file=sys.stderr)
        return 2
    setup_logging()
    return supervise([list(argv[2:])] * int(argv[0]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
