"""Scale: N concurrent zero-soak rollouts on one worker host, served by `bifrost worker --processes P`.

For each count (default 200, then 500) it starts a fresh dev server with DEV_SERVER_FLAGS (`bifrost
server`'s own start_dev_server), starts `bifrost worker --processes P` (default: one per core) on the
simulated fleet, submits every rollout at once and waits for all of them. It reports p50/p95 completion
time, the total wall time, workflow-task timeouts and failures counted in every history on the server (in both
namespaces: the rollouts, and in the machinery namespace their stages, reports and the service locks),
"Task not found" warnings in the workers' logs, and peak RSS and CPU seconds of every process (worker
processes, supervisor, dev server), read from /proc. Goals: 0 workflow-task timeouts at 200 rollouts, and
500 rollouts in <= 2.5x the 200-rollout time.

    .venv/bin/python benchmarks/scale.py                      # the full run (200, then 500): many minutes
    .venv/bin/python benchmarks/scale.py --counts 20,50       # a smoke run
    .venv/bin/python benchmarks/scale.py --processes 1 -- --max-workflow-tasks 100   # extra worker flags after --
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from histories import namespace_clients, run_main  # noqa: E402
from temporalio.api.enums.v1 import EventType, TaskQueueType, TimeoutType, WorkflowTaskFailedCause  # noqa: E402
from temporalio.api.taskqueue.v1 import TaskQueue  # noqa: E402
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest  # noqa: E402
from temporalio.client import Client  # noqa: E402

from bifrost_cli.ops import start_rollout  # noqa: E402
from worker.connect import connect  # noqa: E402
from worker.server import DEV_SERVER_FLAGS, DevServer, start_dev_server  # noqa: E402
from workflows.request import RolloutRequest, parse_request  # noqa: E402

BIFROST = str(Path(sys.executable).parent / "bifrost")
GOAL_RATIO = 2.5
QUEUE = "bifrost-scale"
CLK_TCK = os.sysconf("SC_CLK_TCK")
REGIONS = [("us-east-1", 0.5), ("eu-west-1", 0.3), ("ap-south-1", 0.2), ("us-west-2", 0.1)]


def request(i: int, regions: int) -> RolloutRequest:
    picked = REGIONS[:regions]
    total = sum(share for _, share in picked)
    return parse_request({
        "service": f"scale-{i}", "version": "2.0.0", "requested_by": "bench",
        "regions": [{"name": name, "traffic_share": share / total} for name, share in picked],
        "canary": {"metrics": [{"name": "latency_p99", "kind": "latency"},
                               {"name": "error_rate", "kind": "error_rate", "critical": True}],
                   "analysis_minutes": 0, "judge": {"min_samples": 30}},
        "soak": {"test_hours": 0, "prod_hours": 0},
        "blast_radius": {"canary_region": None},
    })


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ProcStats:
    """Peak RSS, CPU time and time spent waiting for a CPU (runnable but not running) of one live process, from /proc."""

    role: str
    pid: int
    peak_rss_mb: float
    cpu_seconds: float
    runnable_wait_seconds: float  # all threads: >> 0 means the machine's cores were busy when this process wanted one
    loop_blocked: str = ""  # a worker's own account of its event loop, from its last log line

    @classmethod
    def read(cls, role: str, pid: int) -> ProcStats:
        status = Path(f"/proc/{pid}/status").read_text()
        hwm = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime
        wait = sum(int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[1])
                   for tid in os.listdir(f"/proc/{pid}/task")) / 1e9
        return cls(role, pid, hwm / 1024, cpu, wait)


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (a worker's forkserver and render processes), from /proc's children lists."""
    try:
        kids = [int(k) for k in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
    return [k for kid in kids for k in (kid, *_descendants(kid))]


@dataclass
class Outcome:
    count: int
    processes: int
    wall: float
    completions: list[float]
    statuses: dict[str, int]
    history: HistoryStats
    not_found_warnings: int
    procs: list[ProcStats] = field(default_factory=list)

    def quantile(self, q: float) -> float:
        xs = sorted(self.completions)
        return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def _loop_summaries(log: Path) -> dict[int, str]:
    out = {}
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{") and "worker stopped;" in line:
            record = json.loads(line)
            out[record["pid"]] = record["msg"].split("; ", 1)[1]
    return out


def _started_pids(log: Path) -> list[int]:
    pids = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{") and "worker started" in line:
            pids.append(json.loads(line)["pid"])
    return pids


async def _pollers(client: Client) -> int:
    resp = await client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
        namespace=client.namespace, task_queue=TaskQueue(name=QUEUE),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    ))
    return len(resp.pollers)


@dataclass
class HistoryStats:
    """What every history on the server says about workflow tasks: timeouts by kind, failures by cause, latencies."""

    histories: int = 0
    by_namespace: dict[str, int] = field(default_factory=dict)
    timeouts: dict[str, int] = field(default_factory=dict)
    failure_causes: dict[str, int] = field(default_factory=dict)  # e.g. UNHANDLED_COMMAND: a signal came mid-task
    schedule_to_start: list[float] = field(default_factory=list)  # workflow task waits for a worker
    start_to_complete: list[float] = field(default_factory=list)  # workflow task runs on the worker
    activity_wait: list[float] = field(default_factory=list)  # activity schedule to start

    @property
    def total_timeouts(self) -> int:
        return sum(self.timeouts.values())

    @property
    def failures(self) -> int:
        return sum(self.failure_causes.values())


async def _history_stats(clients: Iterable[Client]) -> HistoryStats:
    """Read every history in each client's namespace (a fresh server per count: they are all this run's); pass
    `namespace_clients(client).values()` for the rollouts and, in the machinery namespace, their stages."""
    ids = [(c, wf.id, wf.run_id) for c in clients async for wf in c.list_workflows()]
    gate = asyncio.Semaphore(16)
    stats = HistoryStats(histories=len(ids))
    for c, _, _ in ids:
        stats.by_namespace[c.namespace] = stats.by_namespace.get(c.namespace, 0) + 1
    E = EventType

    async def one(c: Client, wid: str, rid: str) -> None:
        async with gate:
            events = [e async for e in c.get_workflow_handle(wid, run_id=rid).fetch_history_events()]
        t = {e.event_id: e.event_time.ToDatetime().timestamp() for e in events}
        for e in events:
            if e.event_type == E.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
                kind = TimeoutType.Name(e.workflow_task_timed_out_event_attributes.timeout_type).removeprefix("TIMEOUT_TYPE_")
                stats.timeouts[kind] = stats.timeouts.get(kind, 0) + 1
            elif e.event_type == E.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                cause = WorkflowTaskFailedCause.Name(e.workflow_task_failed_event_attributes.cause)
                cause = cause.removeprefix("WORKFLOW_TASK_FAILED_CAUSE_")
                stats.failure_causes[cause] = stats.failure_causes.get(cause, 0) + 1
            elif e.event_type == E.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                stats.schedule_to_start.append(t[e.event_id] - t[e.workflow_task_started_event_attributes.scheduled_event_id])
            elif e.event_type == E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                stats.start_to_complete.append(t[e.event_id] - t[e.workflow_task_completed_event_attributes.started_event_id])
            elif e.event_type == E.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                stats.activity_wait.append(t[e.event_id] - t[e.activity_task_started_event_attributes.scheduled_event_id])

    await asyncio.gather(*(one(c, w, r) for c, w, r in ids))
    return stats


def _spread(xs: list[float]) -> str:
    if not xs:
        return "-"
    xs = sorted(xs)
    q = lambda f: xs[min(len(xs) - 1, round(f * (len(xs) - 1)))]  # noqa: E731
    return f"p50 {q(0.5) * 1000:.0f} ms, p95 {q(0.95) * 1000:.0f} ms, max {xs[-1]:.1f} s"


def worker_command(args: argparse.Namespace, workdir: Path, count: int) -> list[str]:
    """`bifrost worker` for one count, with a simulated fleet of its own: the fleet keeps its versions in a file
    (`--fleet-db`, by default .bifrost/fleet.db in the working directory), and a `scale-<i>` already on 2.0.0 from an
    earlier count or run has nothing to deploy or judge, so it would be measured as a cheaper rollout."""
    reports = [] if "--no-reports" in args.worker_args else ["--reports", str(workdir / "reports")]
    fleet = workdir / f"fleet-{count}-{time.time_ns()}.db"
    return [BIFROST, "worker", "--processes", str(args.processes), "--task-queue", QUEUE, "--fleet-db", str(fleet),
            *reports, *args.worker_args]


async def run_count(count: int, args: argparse.Namespace, workdir: Path) -> Outcome:
    port = free_port()
    server: DevServer = start_dev_server(port=port, ui_port=None, db_file=None, log_file=workdir / f"temporal-{count}.log")
    log = workdir / f"worker-{count}.log"
    environ = {**os.environ, "TEMPORAL_ADDRESS": server.address, "TEMPORAL_NAMESPACE": "default"}
    environ.pop("TEMPORAL_API_KEY", None)
    with open(log, "wb") as out:
        workers = subprocess.Popen(worker_command(args, workdir, count), stdout=out, stderr=subprocess.STDOUT, env=environ)
    try:
        client = await connect(server.address, "default")
        async with asyncio.timeout(180):
            while len(_started_pids(log)) < args.processes or await _pollers(client) < args.processes:
                if workers.poll() is not None:
                    raise RuntimeError(f"the workers exited with {workers.returncode}:\n{log.read_text()[-3000:]}")
                await asyncio.sleep(0.2)
        pids = _started_pids(log)
        requests = [request(i, args.regions) for i in range(count)]
        print(f"  {count} rollouts: submitting to {args.processes} worker process(es) ...", flush=True)
        done: list[float] = []
        statuses: dict[str, int] = {}

        async def one(req: RolloutRequest) -> None:
            t0 = time.monotonic()
            handle = await start_rollout(client, req, QUEUE)
            result = await handle.result()
            done.append(time.monotonic() - t0)
            statuses[result.status] = statuses.get(result.status, 0) + 1

        start = time.monotonic()
        async with asyncio.timeout(args.timeout):
            await asyncio.gather(*(one(r) for r in requests))
        wall = time.monotonic() - start
        procs = [ProcStats.read(f"worker {i + 1}", pid) for i, pid in enumerate(pids)]
        procs += [ProcStats.read(f"worker {i + 1}'s child process {n + 1}", kid)
                  for i, pid in enumerate(pids) for n, kid in enumerate(_descendants(pid))]
        procs.append(ProcStats.read("supervisor", workers.pid))
        procs.append(ProcStats.read("dev server", server.process.pid))
        workers.send_signal(signal.SIGTERM)
        await asyncio.to_thread(workers.wait, 60)
        summaries = _loop_summaries(log)
        for proc in procs:
            proc.loop_blocked = summaries.get(proc.pid, "")
        print(f"  {count} rollouts done in {wall:.1f} s; counting workflow-task timeouts in the histories ...", flush=True)
        history = await _history_stats(namespace_clients(client).values())
        not_found = sum("not found" in line.lower() for line in log.read_text(errors="replace").splitlines())
        return Outcome(count, args.processes, wall, done, statuses, history, not_found, procs)
    finally:
        if workers.poll() is None:
            workers.kill()
            workers.wait()
        server.stop()


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--counts", default="200,500", help="comma-separated numbers of concurrent rollouts, run in turn")
    p.add_argument("--processes", type=int, default=os.cpu_count() or 1, help="worker processes (default: one per core)")
    p.add_argument("--regions", type=int, default=2, choices=range(1, len(REGIONS) + 1),
                   help="regions per rollout, each with a test and a prod stage")
    p.add_argument("--timeout", type=float, default=3600, help="give up on a count after this many seconds")
    p.add_argument("--logs", type=Path, help="keep the dev servers' and workers' logs in this folder")
    p.add_argument("worker_args", nargs="*", help="more `bifrost worker` flags, after --")
    args = p.parse_args(argv)
    args.counts = [int(c) for c in args.counts.split(",") if c]
    return args


async def main(args: argparse.Namespace) -> None:
    print(f"scale benchmark: {args.counts} concurrent rollouts of {args.regions} region(s) x (test, prod), zero soak, "
          f"simulated fleet; `bifrost worker --processes {args.processes} {' '.join(args.worker_args)}`; "
          f"dev server with {' '.join(DEV_SERVER_FLAGS[1::2])}; {os.cpu_count()} cores", flush=True)
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="bifrost-scale-") as tmp:
        workdir = args.logs or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        for count in args.counts:
            outcomes.append(await run_count(count, args, workdir))
    print()
    print(f"{'rollouts':>8} {'wall s':>8} {'p50 s':>7} {'p95 s':>7} {'task timeouts':>13} {'task failures':>13} "
          f"{'not found':>9}  outcomes")
    for o in outcomes:
        print(f"{o.count:>8} {o.wall:>8.1f} {o.quantile(0.5):>7.1f} {o.quantile(0.95):>7.1f} {o.history.total_timeouts:>13} "
              f"{o.history.failures:>13} {o.not_found_warnings:>9}  {o.statuses} in {o.history.histories} histories "
              f"({', '.join(f'{n} {k}' for k, n in o.history.by_namespace.items())})")
    print()
    for o in outcomes:
        h = o.history
        print(f"{o.count} rollouts: workflow-task timeouts by kind {h.timeouts or '{}'}; "
              f"failures by cause {h.failure_causes or '{}'}; workflow task waits for a worker "
              f"{_spread(h.schedule_to_start)}; runs on it {_spread(h.start_to_complete)}; "
              f"activity waits for a worker {_spread(h.activity_wait)}")
    print()
    for o in outcomes:
        print(f"{o.count} rollouts, per process:\n  " + "\n  ".join(
            f"{p.role} peak RSS {p.peak_rss_mb:.0f} MB, CPU {p.cpu_seconds:.1f} s ({p.cpu_seconds / o.wall:.0%} of a core), "
            f"waited {p.runnable_wait_seconds:.1f} s for a core" + (f", {p.loop_blocked}" if p.loop_blocked else "")
            for p in o.procs))
    print()
    first = outcomes[0]
    print(f"goal: 0 workflow-task timeouts at {first.count} rollouts -> {first.history.total_timeouts} "
          f"({'met' if first.history.total_timeouts == 0 else 'NOT met'})")
    if len(outcomes) > 1:
        last = outcomes[-1]
        ratio = last.wall / first.wall
        load = last.count / first.count
        print(f"goal: {last.count} rollouts in <= {GOAL_RATIO}x the time of {first.count} -> {last.wall:.1f} s / {first.wall:.1f} s "
              f"= {ratio:.2f}x for {load:.1f}x the load = {ratio / GOAL_RATIO:.2f} of the goal "
              f"({'met' if ratio <= GOAL_RATIO else 'NOT met'})")
    if any(sum(o.statuses.values()) != o.count or set(o.statuses) != {"succeeded"} for o in outcomes):
        print("WARNING: not every rollout succeeded; the figures above are not comparable")


if __name__ == "__main__":
    run_main(main(_args()))
