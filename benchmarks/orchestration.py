"""Orchestration overhead: a 3-region x (test, prod) rollout with zero soak on the instant simulated fleet.

Starts its own local dev server (with DEV_SERVER_FLAGS, like `bifrost server`; `--without-fix` leaves them
out to show the default dev server), runs the rollout a few times, and measures on the same server its own
hop: a trivial workflow running no-op activities in sequence. From the median rollout's histories (the
rollout, and in the machinery namespace its stages and the service lock) it finds the critical path
(benchmarks/critical_path.py), counts the hops on it (workflow tasks, each woken by an activity, a child, a
Nexus operation, a timer or a signal), and prints where the time went, what the crossings between the two
namespaces cost (Nexus starts and ends, signals sent by activity), and how the overhead compares with
hops x hop. Goals: <= 0.8 s per rollout, <= 135 ms per stage. Then one rollout
whose first canary fails shows how many workflow tasks pass between the verdict and the rollback (goal: 1).

With `--telemetry`, it instead measures what metrics and tracing cost the worker: batches of rollouts on a
worker without telemetry, serving Prometheus metrics (scraped every second), sending every span over
OTLP/HTTP to a local sink, both, and both with one rollout in ten traced, in rounds of alternating order; it
prints the worker process's CPU per stage for each, its batches, and the ratio to none with a 95% bootstrap
interval over batches paired by round (goal: <= 1.05, met only when the whole interval is under it), then the
same CPU by thread (event loop, workflow threads, Core, span exporter) and the garbage collector's share. By default
its stages draw no reports (orchestration alone: the worst case for a ratio); `--with-reports` draws them as
`bifrost worker` does, in one render process, and counts that process's CPU as the worker's.

With `--skeleton`, it then runs the median rollout's topology (read from its histories) with no-op bodies on a
worker configured like Bifrost's (benchmarks/skeleton.py) and prints both side by side: the skeleton's ratio is the
SDK's floor for this shape. `--unsandboxed` and `--unconfirmed` add the skeleton on the unsandboxed runner and the
skeleton without its confirming queries.

    .venv/bin/python benchmarks/orchestration.py [--runs 7] [--without-fix] [--dynamic-config KEY=VALUE ...]
    .venv/bin/python benchmarks/orchestration.py --runs 8 --skeleton [--unsandboxed] [--unconfirmed] [--no-reports]
    .venv/bin/python benchmarks/orchestration.py --telemetry [--batches 4] [--runs 5] [--settings off,tracing] [--with-reports]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from critical_path import CriticalPath, critical_path, woken_by  # noqa: E402
from histories import Tree, dev_server, fetch_tree, handler_of, run_main  # noqa: E402
from skeleton import SkeletonRollout, skeleton_workers  # noqa: E402
from temporalio import activity, workflow  # noqa: E402
from temporalio.api.enums.v1 import EventType  # noqa: E402
from temporalio.api.history.v1 import HistoryEvent  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.worker import UnsandboxedWorkflowRunner, Worker  # noqa: E402

from activities.adapters.registry import AdapterRegistry  # noqa: E402
from activities.adapters.reports import NoReports  # noqa: E402
from activities.adapters.simulated import FleetScenario, SimulatedFleet, VersionEffect  # noqa: E402
from bifrost_cli.ops import outcome, start_rollout  # noqa: E402
from worker.build import build_worker  # noqa: E402
from worker.endpoints import machinery_client  # noqa: E402
from worker.server import DEV_SERVER_FLAGS  # noqa: E402
from workflows.request import RolloutRequest, parse_request  # noqa: E402

GOAL_ROLLOUT = 0.8  # s
GOAL_STAGE = 0.135  # s
GOAL_TELEMETRY = 1.05  # worker CPU per stage with metrics and tracing on / off
TELEMETRY_SETTINGS = ("off", "metrics", "tracing", "both", "both-10%")


@activity.defn(name="bench_noop")
async def bench_noop(i: int) -> int:
    return i


@workflow.defn(name="BenchHop")
class HopWorkflow:
    """A trivial workflow: N no-op activities in sequence; each costs one hop (activity + the task it wakes)."""

    @workflow.run
    async def run(self, n: int) -> int:
        for i in range(n):
            await workflow.execute_activity("bench_noop", i, start_to_close_timeout=timedelta(seconds=10))
        return n


BAD = "6.6.6"  # the fleet's canaries of this version fail eight times as often: the judge fails them


def request(i: int, version: str = "2.0.0") -> RolloutRequest:
    return parse_request({
        "service": f"bench-{i}", "version": version, "requested_by": "bench",
        "regions": [{"name": "us-east-1", "traffic_share": 0.5}, {"name": "eu-west-1", "traffic_share": 0.3},
                    {"name": "ap-south-1", "traffic_share": 0.2}],
        "canary": {"metrics": [{"name": "latency_p99", "kind": "latency"},
                               {"name": "error_rate", "kind": "error_rate", "critical": True}],
                   "analysis_minutes": 0, "judge": {"min_samples": 30}},
        "soak": {"test_hours": 0, "prod_hours": 0},
    })


async def verdict_to_rollback(client: Client, stage_id: str) -> tuple[int, float]:
    """Workflow tasks completed, and server seconds, from the failing `analyze_canary`'s completion to the
    scheduling of the stage's `rollback` (goal: the task that reads the verdict schedules it, i.e. 1). The stage
    runs in the machinery namespace of `client`'s."""
    stage = machinery_client(client).get_workflow_handle(stage_id)
    events: list[HistoryEvent] = [e async for e in stage.fetch_history_events()]
    names = {e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name for e in events
             if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED}
    verdict = next(e for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
                   and names[e.activity_task_completed_event_attributes.scheduled_event_id] == "analyze_canary")
    rollback = next(e for e in events if e.event_id in names and names[e.event_id] == "rollback")
    tasks = sum(1 for e in events if verdict.event_id < e.event_id < rollback.event_id
                and e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
    return tasks, rollback.event_time.ToDatetime().timestamp() - verdict.event_time.ToDatetime().timestamp()


def shape_of(tree: Tree) -> dict[str, list[list[str]]]:
    """The skeleton's arguments, read from a real rollout's histories (see benchmarks/skeleton.py): its waves (the
    stages started in one workflow task, by Nexus operation), the commands of its first stage grouped by the workflow
    task that issued them, the rollout's activities before each wave, and its groups of activities after its last
    stage closed. Signals across namespaces (`signal_workflow` activities) and queries are the skeleton's own."""
    root = tree.root_chain[-1]
    root_id = root.workflow_id
    started = {e.nexus_operation_started_event_attributes.scheduled_event_id: handler_of(e) for e in root.events
               if e.event_type == EventType.EVENT_TYPE_NEXUS_OPERATION_STARTED}
    by_task: dict[int, list[HistoryEvent]] = {}
    for e in root.events:
        attrs = getattr(e, e.WhichOneof("attributes"))
        if e.event_type in (EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, EventType.EVENT_TYPE_NEXUS_OPERATION_SCHEDULED):
            by_task.setdefault(attrs.workflow_task_completed_event_id, []).append(e)
    waves: list[list[str]] = []
    before: list[list[str]] = [[]]
    own = ("query_workflow", "request_service_lock", "signal_workflow")
    for _, events in sorted(by_task.items()):
        stages = [handler[1].removeprefix(root_id + "/") for e in events
                  if e.event_type == EventType.EVENT_TYPE_NEXUS_OPERATION_SCHEDULED and (handler := started.get(e.event_id))]
        names = [e.activity_task_scheduled_event_attributes.activity_type.name for e in events
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
        if stages:
            waves.append(stages)
            before.append([])
        before[-1] += [n for n in names if n not in own]
    last_stage = max(e.event_id for e in root.events if e.event_type == EventType.EVENT_TYPE_NEXUS_OPERATION_COMPLETED)
    after = [[e.activity_task_scheduled_event_attributes.activity_type.name for e in events
              if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
              and e.activity_task_scheduled_event_attributes.activity_type.name not in own]
             for task, events in sorted(by_task.items()) if task > last_stage]
    stage = min((chain[0] for chain in tree.runs.values() if chain[0].workflow_type == "StageWorkflow"),
                key=lambda r: r.started.event_time.ToDatetime())
    items = {"query_workflow": "query", "signal_workflow": "progress"}  # a stage signals only its rollout
    groups: dict[int, list[str]] = {}
    for e in stage.events:
        attrs = getattr(e, e.WhichOneof("attributes"))
        item = ""
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            item = items.get(attrs.activity_type.name, f"act:{attrs.activity_type.name}")
        elif e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            item = "report"
        elif e.event_type == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
            item = "progress"
        if item:
            groups.setdefault(attrs.workflow_task_completed_event_id, []).append(item)
    steps = []
    for task, group in sorted(groups.items()):
        done = stage.event(task).workflow_task_completed_event_attributes
        cause = woken_by(stage, stage.event(done.scheduled_event_id))
        steps.append((["wait"] if cause.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED else []) + group)
    return {"waves": waves, "steps": steps, "before": before[:len(waves)], "after": [g for g in after if g]}


def _path_row(path: CriticalPath, wall: float, hop: float) -> dict[str, str]:
    tasks = path.seconds["workflow task runs on the worker (start to complete)"]
    acts = path.seconds["activity runs (start to close)"]
    return {
        "wall time (median)": f"{wall:.3f} s",
        "hops on the critical path": f"{path.workflow_tasks}",
        "activities on it": f"{path.activities}",
        "workflow task on the worker, per task": f"{tasks / max(path.workflow_tasks, 1) * 1000:.1f} ms",
        "  all workflow tasks on the path": f"{tasks:.3f} s",
        "activity run, per activity": f"{acts / max(path.activities, 1) * 1000:.1f} ms",
        "  all activities on the path": f"{acts:.3f} s",
        "workflow task waits for a worker": f"{path.seconds['workflow task waits for a worker (schedule to start)']:.3f} s",
        "server's own time on the path": f"{sum(v for k, v in path.seconds.items() if k.startswith('server')):.3f} s",
        "overhead / (hops x hop)": f"{wall / (path.workflow_tasks * hop):.2f}",
    }


async def run_skeleton(client: Client, shape: dict[str, list[list[str]]], runs: int, names: list[str],
                       sandboxed: bool = True, confirm: bool = True) -> tuple[float, float, CriticalPath, list[float]]:
    """`runs` skeleton rollouts one after another: the median warm wall time, its critical path, and process CPU."""
    queue = f"skeleton-{uuid.uuid4().hex[:6]}"
    workers = await skeleton_workers(client, queue, names, sandboxed)
    locks = machinery_client(client)
    walls: list[tuple[float, str]] = []
    cpus: list[float] = []
    async with contextlib.AsyncExitStack() as stack:
        for worker in workers:
            await stack.enter_async_context(worker)
        for i in range(runs):
            wid = f"skeleton-rollout-{uuid.uuid4().hex[:6]}-{i}"
            t0, c0 = time.perf_counter(), os.times()
            await client.execute_workflow(SkeletonRollout.run, args=[f"skeleton-lock-{wid}", shape["waves"], shape["steps"],
                                                                       shape["before"], shape["after"], confirm],
                                          id=wid, task_queue=queue)
            c1 = os.times()
            walls.append((time.perf_counter() - t0, wid))
            cpus.append(c1.user - c0.user + c1.system - c0.system)
            # the lock confirms the release after the rollout ended (as Bifrost's does): let it end on this worker
            await locks.get_workflow_handle(f"skeleton-lock-{wid}").result()
    warm = sorted(walls[1:] or walls)
    wall, wid = warm[len(warm) // 2]
    path = critical_path(await fetch_tree(client, wid))
    return wall, warm[0][0], path, sorted(cpus[1:] or cpus)


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=7, help="rollouts, one after another (the first is a cold start)")
    p.add_argument("--hop-steps", type=int, default=30, help="no-op activities in the hop workflow")
    p.add_argument("--without-fix", action="store_true", help="leave DEV_SERVER_FLAGS out: the default dev server")
    p.add_argument("--no-reports", action="store_true",
                   help="draw no canary reports (their cost is measured by report_render.py): orchestration alone")
    p.add_argument("--hop-only", action="store_true", help="measure only the server's own hop (a few seconds)")
    p.add_argument("--dynamic-config", action="append", default=[], metavar="KEY=VALUE",
                   help="more dev-server dynamic config (repeatable)")
    p.add_argument("--skeleton", action="store_true",
                   help="also run the skeleton (benchmarks/skeleton.py): the median rollout's topology with no-op bodies, "
                        "on a worker configured like Bifrost's; prints both side by side (the SDK's floor for this shape)")
    p.add_argument("--unsandboxed", action="store_true",
                   help="with --skeleton: run it once more with the SDK's unsandboxed runner (what the sandbox costs)")
    p.add_argument("--unconfirmed", action="store_true",
                   help="with --skeleton: run it once more without the confirming queries (signals believed)")
    p.add_argument("--telemetry", action="store_true",
                   help="measure the worker CPU that metrics (--metrics-port) and tracing (OTLP) add per stage")
    p.add_argument("--batches", type=int, default=4, help="with --telemetry: batches of --runs rollouts per setting")
    p.add_argument("--with-reports", action="store_true",
                   help="with --telemetry: draw canary reports as `bifrost worker` does by default, in one render process "
                        "shared by every batch (started before the first), and count its CPU as the worker's")
    p.add_argument("--settings", default=",".join(TELEMETRY_SETTINGS),
                   help="with --telemetry: the settings to run, comma-separated (one alone, to profile it)")
    return p.parse_args(argv)


_SINK = """
import sys, threading, time, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(srv.server_address[1], flush=True)
threading.Thread(target=srv.serve_forever, daemon=True).start()
scrapes = 0
while sys.stdin.readline():  # one line per scrape asked for; EOF ends it
    urllib.request.urlopen(sys.argv[1]).read(); scrapes += 1
print(scrapes, flush=True)
"""


class _Sink:
    """Another process (its CPU is not the worker's): an OTLP/HTTP endpoint accepting every export, and
    Prometheus's scrape of the worker's /metrics, once per `scrape()`."""

    def __init__(self, metrics_url: str) -> None:
        import subprocess

        self.proc = subprocess.Popen([sys.executable, "-c", _SINK, metrics_url], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.url = f"http://127.0.0.1:{self.proc.stdout.readline().strip()}"

    def scrape(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def close(self) -> int:
        """Stop it; the number of scrapes it made."""
        out, _ = self.proc.communicate(timeout=30)
        return int(out.strip() or 0)


def _stat_cpu(path: str) -> tuple[str, float] | None:
    """The command name and CPU seconds (user + system) in a /proc .../stat file; None if it is gone (or no /proc)."""
    try:
        with open(path) as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return stat[stat.index("(") + 1:stat.rindex(")")], (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _thread_cpu() -> dict[str, float]:
    """CPU seconds (user + system) of this process's threads so far, by kind: the event loop, Core's Rust
    threads, the span exporter, other Python threads (Linux /proc; empty elsewhere)."""
    import threading

    names = {t.native_id: t.name for t in threading.enumerate()}
    main = threading.main_thread().native_id
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else []:
        read = _stat_cpu(f"/proc/self/task/{tid}/stat")
        if read is None:  # the thread ended meanwhile
            continue
        comm, seconds = read
        name = names.get(int(tid))
        kind = ("event loop" if int(tid) == main else "span export" if name and "Otel" in name
                else f"python: {name.split('-')[0]}" if name else f"native: {comm.rstrip('0123456789-')}")
        out[kind] = out.get(kind, 0.0) + seconds
    return out


def _render_cpu(pool: Any) -> float:
    """CPU seconds (user + system) the render pool's live processes have used so far (Linux /proc; 0 elsewhere)."""
    reads = [_stat_cpu(f"/proc/{pid}/stat") for pid in list(getattr(getattr(pool, "_pool", None), "_processes", None) or {})]
    return sum(read[1] for read in reads if read is not None)  # a process that ended meanwhile is gone


class _GcClock:
    """CPU time the cyclic garbage collector took, and its collections, by generation (gc.callbacks)."""

    def __init__(self) -> None:
        import gc

        self.seconds = [0.0, 0.0, 0.0]
        self.count = [0, 0, 0]
        self._t0 = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.thread_time()
        else:
            self.seconds[info["generation"]] += time.thread_time() - self._t0
            self.count[info["generation"]] += 1

    def snapshot(self) -> tuple[list[float], list[int]]:
        return list(self.seconds), list(self.count)


async def telemetry_cost(args: argparse.Namespace) -> None:
    """Worker CPU per stage without and with metrics + tracing, alternating batches on one dev server."""
    import asyncio

    from worker.build import RenderPool
    from worker.connect import connect
    from worker.telemetry import Telemetry, metrics_runtime, tracing_interceptor

    unknown = [name for name in args.settings.split(",") if name not in TELEMETRY_SETTINGS]
    if unknown:
        raise SystemExit(f"--settings: unknown {', '.join(unknown)}; choose from {', '.join(TELEMETRY_SETTINGS)}")
    env = await dev_server()
    runtime, address = metrics_runtime("127.0.0.1", 0)
    sink = _Sink(f"http://{address}/metrics")
    on = Telemetry(metrics_address=address, otlp_endpoint=sink.url, runtime=runtime,
                   interceptors=[tracing_interceptor(sink.url)])
    target = env.client.service_client.config.target_host
    runtime_only = Telemetry(metrics_address=address, runtime=runtime)
    tracing_only = Telemetry(otlp_endpoint=sink.url, interceptors=on.interceptors)
    sampled = Telemetry(metrics_address=address, otlp_endpoint=sink.url, runtime=runtime,
                        interceptors=[tracing_interceptor(sink.url, sample_ratio=0.1)])
    every = {"off": Telemetry(), "metrics": runtime_only, "tracing": tracing_only, "both": on, "both-10%": sampled}
    settings = {name: every[name] for name in args.settings.split(",")}
    clients = {name: await connect(target, "default", **t.connect_kwargs()) for name, t in settings.items()}
    fleet = SimulatedFleet(FleetScenario(min_samples=60))
    # with --with-reports, one render process for the whole run, started now: its start-up (importing matplotlib)
    # is a worker's once in its life, not once per batch
    pool = RenderPool(1) if args.with_reports else None
    if pool is not None:
        await asyncio.wrap_future(pool.submit(os.getpid))
    cpu = dict.fromkeys(settings, 0.0)
    stages = dict.fromkeys(settings, 0)
    stop = asyncio.Event()

    async def scrape() -> None:  # Prometheus's 1 s scrape of the worker's endpoint
        while not stop.is_set():
            sink.scrape()
            await asyncio.sleep(1)

    scraper = asyncio.create_task(scrape())
    n = 0
    names = list(settings)
    # a warm-up batch first, not counted; then rounds in alternating order (off..both-10%, both-10%..off), so a
    # drift of the process's CPU per stage over the run (heap, caches, the busy machine) weighs on every setting alike
    rounds = [name for r in range(args.batches) for name in (names if r % 2 == 0 else names[::-1])]
    order = ["both" if "both" in settings else names[0]] + rounds
    batches: dict[str, list[float]] = {name: [] for name in settings}
    threads: dict[str, dict[str, float]] = {name: {} for name in settings}  # CPU by thread kind, counted batches
    gc_clock = _GcClock()
    gc_seconds = {name: [0.0, 0.0, 0.0] for name in settings}
    gc_count = {name: [0, 0, 0] for name in settings}
    try:
        for batch, setting in enumerate(order):
            client = clients[setting]
            queue = f"bench-{uuid.uuid4().hex[:6]}"
            async with build_worker(client, AdapterRegistry.simulated(fleet), task_queue=queue,
                                    reports_dir="/tmp/bifrost-bench-reports",
                                    reports=None if pool is not None else NoReports(), render_pool=pool):
                t0, th0, gc0 = os.times(), _thread_cpu(), gc_clock.snapshot()
                if pool is not None:
                    th0["render process"] = _render_cpu(pool)
                batch_stages = 0
                for _ in range(args.runs):
                    result = await outcome(await start_rollout(client, request(n), queue))
                    assert result.status == "succeeded", result.reason
                    n += 1
                    batch_stages += len(result.stages)
                t1, th1, gc1 = os.times(), _thread_cpu(), gc_clock.snapshot()
                if pool is not None:
                    th1["render process"] = _render_cpu(pool)
            if batch:
                for kind, seconds in th1.items():
                    threads[setting][kind] = threads[setting].get(kind, 0.0) + seconds - th0.get(kind, 0.0)
                for g in range(3):
                    gc_seconds[setting][g] += gc1[0][g] - gc0[0][g]
                    gc_count[setting][g] += gc1[1][g] - gc0[1][g]
                used = (t1.user - t0.user) + (t1.system - t0.system) + th1.get("render process", 0.0) - th0.get("render process", 0.0)
                cpu[setting] += used
                stages[setting] += batch_stages
                batches[setting].append(used / batch_stages)
    finally:
        stop.set()
        await scraper
        scrapes = sink.close()
        if pool is not None:
            pool.shutdown()
        await env.shutdown()
    per_stage = {name: cpu[name] / stages[name] for name in settings}
    off = per_stage.get("off", float("nan"))
    print(f"telemetry cost: {args.batches} batches x {args.runs} rollouts per setting, settings in turn, 6 stages each, "
          f"zero soak, instant fleet, {'reports drawn (render process counted)' if pool else 'no reports'}; Prometheus endpoint scraped {scrapes} times, every span sent over "
          f"OTLP/HTTP to a local sink; load average {os.getloadavg()[0]:.1f} at the end")
    for name in settings:
        spread = ", ".join(f"{b * 1000:.0f}" for b in batches[name])
        print(f"  worker process CPU per stage, {name:<9} {per_stage[name] * 1000:6.1f} ms = {per_stage[name] / off:.3f} of off"
              f"  (batches: {spread} ms)")
    kinds = sorted({k for t in threads.values() for k in t}, key=lambda k: -threads[names[0]].get(k, 0.0))
    if kinds:
        print("  by thread, ms per stage: " + "  ".join(f"{name}" for name in settings))
        for kind in kinds:
            row = "  ".join(f"{threads[name].get(kind, 0.0) / stages[name] * 1000:6.1f}" for name in settings)
            print(f"    {kind:<28} {row}")
    for g in range(3):
        row = "  ".join(f"{gc_seconds[name][g] / stages[name] * 1000:6.1f} ({gc_count[name][g]})" for name in settings)
        print(f"    garbage collection, gen {g}, ms per stage (collections) {row}")
    for name, what in (("metrics", "metrics alone"), ("both", "metrics and every rollout traced"),
                       ("both-10%", "metrics and 1 rollout in 10 traced")):
        if name not in per_stage:
            continue
        ratio = per_stage[name] / off
        if "off" not in batches:
            continue
        low, high = ratio_interval(batches["off"], batches[name])
        print(f"  goal worker CPU with {what} / without: {ratio:.3f} (95% interval {low:.3f}-{high:.3f}, "
              f"{len(batches[name])} paired batches) / {GOAL_TELEMETRY:.2f} -> {goal_verdict(low, high, GOAL_TELEMETRY)}")


def ratio_interval(off: list[float], on: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """A bootstrap interval for mean(on) / mean(off) over batches paired by round (a round runs each setting once,
    so a drift of the machine's load weighs on both sides of a pair alike); (nan, nan) with fewer than 3 pairs."""
    import numpy as np
    from scipy.stats import bootstrap

    n = min(len(off), len(on))
    if n < 3:
        return float("nan"), float("nan")
    res = bootstrap((np.asarray(off[:n]), np.asarray(on[:n])), lambda o, b, axis=-1: b.mean(axis=axis) / o.mean(axis=axis),
                    paired=True, vectorized=True, confidence_level=confidence, n_resamples=9999, method="percentile",
                    random_state=np.random.default_rng(0))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def goal_verdict(low: float, high: float, goal: float) -> str:
    """Met only when the whole interval is at or under the goal, NOT met when it is all above; else undecided."""
    if high <= goal:
        return "met"
    if low > goal:
        return "NOT met"
    return "undecided: the interval straddles the goal (more --batches narrow it)"


async def main(args: argparse.Namespace) -> None:
    if args.telemetry:
        return await telemetry_cost(args)
    extra = [arg for kv in args.dynamic_config for arg in ("--dynamic-config-value", kv)]
    env = await dev_server(*extra, with_fix=not args.without_fix)
    queue = f"bench-{uuid.uuid4().hex[:6]}"
    fleet = SimulatedFleet(FleetScenario(min_samples=60, effects=[VersionEffect(version=BAD, error_factor=8)]))
    walls: list[tuple[float, str, int]] = []
    cpus: list[float] = []  # this process's CPU (user + system, all threads) per rollout: the worker's, and the client's
    try:
        async with build_worker(env.client, AdapterRegistry.simulated(fleet), task_queue=queue,
                                reports_dir="/tmp/bifrost-bench-reports", reports=NoReports() if args.no_reports else None):
            for i in range(0 if args.hop_only else args.runs):
                t0, c0 = time.perf_counter(), os.times()
                handle = await start_rollout(env.client, request(i), queue)
                result = await outcome(handle)
                walls.append((time.perf_counter() - t0, handle.id, len(result.stages)))
                c1 = os.times()
                cpus.append(c1.user - c0.user + c1.system - c0.system)
                assert result.status == "succeeded", result.reason
            if not args.hop_only:  # a failing judgement: how soon does the rollback start?
                failing = await start_rollout(env.client, request(args.runs, BAD), queue)
                failed = await outcome(failing)
                assert failed.status == "rolled_back", failed.reason
                first = failed.stages[0].key
                to_rollback = await verdict_to_rollback(env.client, f"{failing.id}/{first}")
        async with Worker(env.client, task_queue=queue + "-hop", workflows=[HopWorkflow], activities=[bench_noop],
                          workflow_runner=UnsandboxedWorkflowRunner()):
            hop_id = f"hop-{uuid.uuid4().hex[:6]}"
            t0 = time.perf_counter()
            await env.client.execute_workflow(HopWorkflow.run, args.hop_steps, id=hop_id, task_queue=queue + "-hop")
            hop_wall = time.perf_counter() - t0
        hop_path = critical_path(await fetch_tree(env.client, hop_id))
        if args.hop_only:
            print(f"server's own hop: {hop_path.span / hop_path.workflow_tasks * 1000:.1f} ms "
                  f"({args.hop_steps} no-op activities in sequence; client wall {hop_wall / args.hop_steps * 1000:.1f} ms "
                  f"per activity); {'default dev server' if args.without_fix else ' '.join(DEV_SERVER_FLAGS[1::2])}")
            return
        warm = sorted(walls[1:] or walls)
        median_wall, median_id, stages = warm[len(warm) // 2]
        tree = await fetch_tree(env.client, median_id)
        path = critical_path(tree)
        if args.skeleton:
            shape = shape_of(tree)
            names = sorted({n for g in shape["before"] + shape["after"] for n in g}
                           | {i[4:] for step in shape["steps"] for i in step if i.startswith("act:")})
            skeleton = await run_skeleton(env.client, shape, args.runs, names)
            bare = await run_skeleton(env.client, shape, args.runs, names, sandboxed=False) if args.unsandboxed else None
            loose = await run_skeleton(env.client, shape, args.runs, names, confirm=False) if args.unconfirmed else None
    finally:
        await env.shutdown()

    hop = hop_path.span / hop_path.workflow_tasks
    overhead = median_wall  # the simulated fleet's work is instant: all of it is orchestration
    per_stage = overhead / stages
    server = "default dev server" if args.without_fix else f"dev server with {' '.join(DEV_SERVER_FLAGS[1::2])}"
    if extra:
        server += " and " + " ".join(args.dynamic_config)
    print(f"orchestration benchmark: 3 regions x (test, prod) = {stages} stages, zero soak, instant fleet; {server}")
    print(f"  server's own hop: {hop * 1000:.1f} ms (a no-op workflow: {args.hop_steps} activities in sequence, "
          f"{hop_path.workflow_tasks} workflow tasks on its path; client wall {hop_wall / args.hop_steps * 1000:.1f} ms per activity)")
    print(f"  rollout wall time: median {median_wall:.2f} s (min {warm[0][0]:.2f}, max {warm[-1][0]:.2f}) over "
          f"{len(warm)} warm runs; first (cold worker) {walls[0][0]:.2f} s")
    print(f"  overhead per stage: {per_stage * 1000:.0f} ms")
    warm_cpu = sorted(cpus[1:] or cpus)
    print(f"  worker process CPU per rollout (user + system, all threads; the client runs in it too, reports are drawn "
          f"in a child process): median {warm_cpu[len(warm_cpu) // 2]:.2f} s (min {warm_cpu[0]:.2f}, max {warm_cpu[-1]:.2f}); "
          f"first {cpus[0]:.2f} s; load average {os.getloadavg()[0]:.1f}")
    print(f"  all history work of that rollout: {tree.count(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)} workflow tasks, "
          f"{tree.count(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)} activities in {sum(1 for _ in tree.all_runs())} "
          f"histories (rollout; stages and lock in the machinery namespace)")
    acts = ", ".join(f"{n} {name}" for name, n in path.by_type.most_common())
    print(f"  critical path: {path.workflow_tasks} hops = {path.workflow_tasks / stages:.1f} per stage "
          f"(workflow tasks); {path.activities} activities on it ({acts})"
          + (f"; {path.timed_out_tasks} timed-out workflow tasks" if path.timed_out_tasks else "")
          + f"; {path.nexus_starts} stage start(s) and {path.nexus_ends} end(s) by Nexus, "
            f"{path.signal_activities} signal(s) across namespaces by activity"
          + (f"; {path.approximations} step(s) caused from outside the workflows, matched by time" if path.approximations else ""))
    ratio = overhead / (path.workflow_tasks * hop)
    print(f"  overhead / (hops x hop) = {overhead:.2f} s / ({path.workflow_tasks} x {hop * 1000:.1f} ms) = {ratio:.2f}"
          "   (1.0: nothing but server hops; above: worker time, below: hops overlap)")
    print(f"  where the critical path's {path.span:.2f} s went (server clock):")
    for what, secs in sorted(path.seconds.items(), key=lambda kv: -kv[1]):
        if secs >= 0.0005:
            print(f"    {what:<58} {secs:6.3f} s  {secs / path.span:5.1%}")
        if what.startswith("activity runs"):
            for name, run in path.activity_seconds.most_common():
                if run >= 0.0005:
                    print(f"      {name:<56} {run:6.3f} s  {run / path.span:5.1%}")
    rest = path.span - sum(path.seconds.values())
    if abs(rest) >= 0.0005:
        print(f"    {'not attributed':<58} {rest:6.3f} s  {rest / path.span:5.1%}")
    if args.skeleton:
        sk_wall, sk_min, sk_path, sk_cpu = skeleton
        real_row, sk_row = _path_row(path, overhead, hop), _path_row(sk_path, sk_wall, hop)
        extra = [(label, run) for label, run in (("unsandboxed", bare), ("unconfirmed", loose)) if run]
        rows = [_path_row(run[2], run[0], hop) for _, run in extra]
        print(f"  skeleton (benchmarks/skeleton.py: this rollout's topology read from its histories, no-op bodies, tiny "
              f"payloads, a worker configured like Bifrost's): {len(shape['waves'])} waves "
              f"{[len(w) for w in shape['waves']]}, stage steps {shape['steps']}, before each wave {shape['before']}, "
              f"after the last {shape['after']}")
        print(f"    {'':<42} {'rollout':>10} {'skeleton':>10}" + "".join(f" {label:>12}" for label, _ in extra))
        for key in real_row:
            print(f"    {key:<42} {real_row[key]:>10} {sk_row[key]:>10}" + "".join(f" {row[key]:>12}" for row in rows))
        print(f"    {'process CPU per rollout (median)':<42} {warm_cpu[len(warm_cpu) // 2]:>8.3f} s {sk_cpu[len(sk_cpu) // 2]:>8.3f} s"
              + "".join(f" {run[3][len(run[3]) // 2]:>10.3f} s" for _, run in extra))
        sk_ratio = sk_wall / (sk_path.workflow_tasks * hop)
        print(f"  skeleton: overhead / (hops x hop) = {sk_wall:.2f} s / ({sk_path.workflow_tasks} x {hop * 1000:.1f} ms) = "
              f"{sk_ratio:.2f} (the SDK's floor for this shape on this machine; min wall {sk_min:.2f} s); "
              f"rollout / skeleton = {overhead / sk_wall:.2f} (wall), {ratio / sk_ratio:.2f} (ratio)")
        hop_task = hop_path.seconds["workflow task runs on the worker (start to complete)"] / hop_path.workflow_tasks
        hop_act = hop_path.seconds["activity runs (start to close)"] / max(hop_path.activities, 1)
        print(f"  the hop's own path, for comparison: workflow task on the worker {hop_task * 1000:.1f} ms per task "
              f"(unsandboxed, one command), activity run {hop_act * 1000:.1f} ms per activity")
        acts = ", ".join(f"{n} {name.removeprefix('skeleton_')} {sk_path.activity_seconds[name] * 1000:.0f} ms"
                         for name, n in sk_path.by_type.most_common())
        print(f"  skeleton's critical path, activities by type (count, run time): {acts}")
        acts = ", ".join(f"{n} {name} {path.activity_seconds[name] * 1000:.0f} ms" for name, n in path.by_type.most_common())
        print(f"  the rollout's, the same way: {acts}")
        print("  where the critical path's time went, rollout / skeleton (s): " + ", ".join(
            f"{what} {path.seconds[what]:.3f} / {sk_path.seconds[what]:.3f}"
            for what in sorted(path.seconds.keys() | sk_path.seconds.keys(), key=lambda k: -path.seconds[k])))
    for label, p in (("rollout", path), *((("skeleton", skeleton[2]),) if args.skeleton else ())):
        each = {"Nexus: scheduled to handler started": p.nexus_starts, "Nexus: handler closed to caller event": p.nexus_ends,
                "signal by activity: scheduled to received": p.signal_activities}
        print(f"  crossings between namespaces on the {label}'s path: {sum(p.crossings.values()):.3f} s = "
              f"{sum(p.crossings.values()) / stages * 1000:.0f} ms per stage (" + ", ".join(
                  f"{n} x {what} {p.crossings[what] / n * 1000:.1f} ms" for what, n in each.items() if n) + ")")
    tasks, secs = to_rollback
    print(f"  a failing judgement ({BAD} in {first}): the rollback was scheduled {tasks} workflow task(s) and "
          f"{secs * 1000:.0f} ms after the verdict")
    print(f"  goal rollback within one workflow task of the verdict: {tasks} / 1 -> {'met' if tasks <= 1 else 'NOT met'}")
    for label, value, goal, unit in (("rollout overhead", overhead, GOAL_ROLLOUT, "s"),
                                     ("overhead per stage", per_stage, GOAL_STAGE, "s")):
        shown = f"{value:.2f} s / {goal:.2f} s" if unit == "s" and goal >= 0.5 else f"{value * 1000:.0f} ms / {goal * 1000:.0f} ms"
        print(f"  goal {label}: {shown} = {value / goal:.2f} of the goal -> {'met' if value <= goal else 'NOT met'}")


if __name__ == "__main__":
    run_main(main(_args()))
