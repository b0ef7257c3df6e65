"""`bifrost worker --processes N` and the embedded dev server's settings, against real processes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

from worker.server import DEV_SERVER_FLAGS, start_dev_server

BIFROST = str(Path(sys.executable).parent / "bifrost")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.server
def test_dev_server_runs_with_the_fast_transfer_queue_flag(tmp_path):
    assert DEV_SERVER_FLAGS == ["--dynamic-config-value", "history.transferProcessorMaxPollRPS=1000"]
    server = start_dev_server(port=_free_port(), ui_port=None, db_file=None, log_file=tmp_path / "temporal.log")
    try:
        argv = Path(f"/proc/{server.process.pid}/cmdline").read_bytes().decode().split("\0")
        i = argv.index("history.transferProcessorMaxPollRPS=1000")
        assert argv[i - 1] == "--dynamic-config-value"
        assert server.process.poll() is None  # the server accepted the flag and is serving
    finally:
        server.stop()


async def _poller_pids(client, task_queue: str) -> set[int]:
    """Process ids of the workflow pollers on `task_queue` (the SDK's default identity is `pid@host`)."""
    resp = await client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
        namespace=client.namespace, task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    ))
    return {int(p.identity.split("@", 1)[0]) for p in resp.pollers if p.identity.split("@", 1)[0].isdigit()}


def _log_pids(log: Path, message: str) -> set[int]:
    pids = set()
    for line in log.read_text().splitlines():
        if line.startswith("{") and message in line:
            pids.add(json.loads(line)["pid"])
    return pids


async def test_worker_processes_poll_one_task_queue_and_stop_together_on_sigterm(env, task_queue, tmp_path):
    log = tmp_path / "worker.log"
    environ = {**os.environ, "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
               "TEMPORAL_NAMESPACE": env.client.namespace}
    environ.pop("TEMPORAL_API_KEY", None)
    with open(log, "wb") as out:
        proc = subprocess.Popen([BIFROST, "worker", "--processes", "2", "--task-queue", task_queue,
                                 "--reports", str(tmp_path / "reports"), "--fleet-db", str(tmp_path / "fleet.db")],
                                stdout=out, stderr=subprocess.STDOUT, env=environ)
    try:
        async with asyncio.timeout(120):  # two fresh interpreters import the SDK, numpy and scipy on a shared machine
            while len(started := _log_pids(log, "worker started")) < 2:
                assert proc.poll() is None, log.read_text()
                await asyncio.sleep(0.2)
            while not started <= await _poller_pids(env.client, task_queue):
                await asyncio.sleep(0.2)
        assert len(started) == 2 and proc.pid not in started
        for pid in started:  # children of the supervisor, not strays
            assert Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1] == str(proc.pid)
        proc.send_signal(signal.SIGTERM)
        returncode = await asyncio.to_thread(proc.wait, 60)
        assert returncode == 0, log.read_text()
        assert _log_pids(log, "worker stopped") == started
        for pid in started:
            assert not Path(f"/proc/{pid}").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.process
def test_a_worker_that_exits_on_its_own_stops_the_others_and_its_code_is_returned(tmp_path):
    # the first copy to create the marker exits with 3; the others wait for a signal
    code = ("import os, signal, sys\n"
            "try:\n"
            f"    os.close(os.open({str(tmp_path / 'first')!r}, os.O_CREAT | os.O_EXCL))\n"
            "except FileExistsError:\n"
            "    signal.pause()\n"
            "sys.exit(3)\n")
    done = subprocess.run([sys.executable, "-m", "worker.processes", "3", "--", sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    started = next(json.loads(line)["msg"] for line in done.stderr.splitlines() if "worker processes:" in line)
    pids = [int(p) for p in started.rsplit("[", 1)[1].rstrip("]").split(", ")]
    assert len(pids) == 3
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists()


def test_the_deployment_gives_each_worker_process_one_core():
    import yaml

    deployment = yaml.safe_load((Path(__file__).resolve().parents[2] / "deploy/kubernetes/deployment.yaml").read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    processes = int(args[args.index("--processes") + 1])
    assert float(container["resources"]["limits"]["cpu"]) == processes
