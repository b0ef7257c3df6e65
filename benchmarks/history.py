"""History size: events and bytes per stage, per soak look, and for a 48 h soak at 1-minute looks.

Runs rollouts on the time-skipping dev server (like the `ts_env` test fixture: hours of soak take seconds)
and measures every history they leave: the rollout, and in the machinery namespace its stages, their reports and
the service lock, every run of each (continue-as-new chains are followed), with the sizes the server itself reports (DescribeWorkflowExecution:
history_length, history_size_bytes). Goal: <= 10,240 events and <= 10 MB in any single history, the
server's default warning limits (it fails a workflow at 51,200 events or 50 MB).

    .venv/bin/python benchmarks/history.py                      # 2 and 10 metrics, 1 h soaks, then the 48 h soak
    .venv/bin/python benchmarks/history.py --long-hours 6       # a shorter long soak, extrapolated to 48 h
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from histories import dev_server, fetch_tree, run_main  # noqa: E402
from temporalio.api.common.v1 import WorkflowExecution  # noqa: E402
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionRequest  # noqa: E402
from temporalio.client import Client  # noqa: E402

from activities.adapters.registry import AdapterRegistry  # noqa: E402
from activities.adapters.simulated import FleetScenario, SimulatedFleet  # noqa: E402
from bifrost_cli.ops import start_rollout  # noqa: E402
from worker.build import build_worker  # noqa: E402
from workflows.request import RolloutRequest, parse_request  # noqa: E402
from workflows.stage.models import STAGE_HISTORY_BUDGET  # noqa: E402

GOAL_EVENTS = 10_240
GOAL_BYTES = 10 * 1024 * 1024
TARGET_HOURS = 48.0
LOOK_MINUTES = 1.0
QUEUE = "bifrost-history"
IDLE = ("lock", "stage us-east-1/test")  # idle while the prod stage soaks: see Measured.largest
ROLLOUT_TIMEOUT = 1800.0  # s of wall time for one measured rollout
# The dev server fires no timer sooner than 1 s after it is created (history.timerProcessorMaxTimeShift),
# even a skipped one, so every soak look would cost a second of wall time; it changes no history event.
FAST_TIMERS = ["--dynamic-config-value", "history.timerProcessorMaxTimeShift=\"10ms\""]


def metrics(n: int) -> list[dict]:
    kinds = ["latency", "error_rate"]
    return [{"name": f"m{i}_{kinds[i % 2]}", "kind": kinds[i % 2], "critical": i == 1} for i in range(n)]


def request(n_metrics: int, prod_hours: float, regions: int = 1) -> RolloutRequest:
    names = [("us-east-1", 0.5), ("eu-west-1", 0.3), ("ap-south-1", 0.2)][:regions]
    total = sum(s for _, s in names)
    return parse_request({
        "service": f"hist-{uuid.uuid4().hex[:8]}", "version": "2.0.0", "requested_by": "bench",
        "regions": [{"name": n, "traffic_share": s / total} for n, s in names],
        "canary": {"metrics": metrics(n_metrics), "analysis_minutes": 0, "judge": {"min_samples": 30},
                   "soak_check_minutes": LOOK_MINUTES},
        "soak": {"test_hours": 0, "prod_hours": prod_hours},
        "blast_radius": {"canary_region": None},
    })


@dataclass
class Size:
    events: int
    bytes: int

    def __str__(self) -> str:
        return f"{self.events:,} events, {self.bytes / 1024:,.1f} KB"


@dataclass
class Measured:
    """One rollout: its wall time and, per workflow kind, the runs' sizes (server-reported)."""

    label: str
    wall: float
    runs: dict[str, list[Size]]  # "rollout" | "stage <key>" | "lock" -> one Size per run

    def largest(self) -> tuple[str, Size]:
        """The largest single history of the rollout, its stages and their reports. Left out: the lock, and the test
        stage waiting for its verdict while the prod stage soaks. On this server each workflow has its own virtual
        clock, and their idle timers (the lock's 10-minute holder checks, the waiting stage's 4-hour look whether its
        rollout still runs) race ahead of the rollout's, growing with the wall time, not the soak."""
        return max(((k, s) for k, sizes in self.runs.items() if k not in IDLE for s in sizes),
                   key=lambda ks: (ks[1].events, ks[1].bytes))

    def total(self, kind: str) -> Size:
        sizes = self.runs[kind]
        return Size(sum(s.events for s in sizes), sum(s.bytes for s in sizes))


async def _server_size(client: Client, namespace: str, workflow_id: str, run_id: str) -> Size:
    desc = await client.workflow_service.describe_workflow_execution(DescribeWorkflowExecutionRequest(
        namespace=namespace, execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id)))
    info = desc.workflow_execution_info
    return Size(int(info.history_length), int(info.history_size_bytes))


async def measure(client: Client, req: RolloutRequest, label: str) -> Measured:
    t0 = time.perf_counter()
    handle = await start_rollout(client, req, QUEUE)
    async with asyncio.timeout(ROLLOUT_TIMEOUT):  # a stalled time-skipping session must not hang the run
        result = await handle.result()
    wall = time.perf_counter() - t0
    if result.status != "succeeded":
        raise RuntimeError(f"{label}: the rollout ended {result.status}: {result.reason}")
    tree = await fetch_tree(client, handle.id)
    runs: dict[str, list[Size]] = {}
    for (namespace, wid), chain in tree.runs.items():  # the stages, their reports and the lock: machinery namespace
        kind = ("rollout" if wid == handle.id else "lock" if wid.startswith("service-lock/")
                else "stage " + wid.removeprefix(handle.id + "/"))
        runs[kind] = [await _server_size(client, namespace, r.workflow_id, r.run_id) for r in chain]
    return Measured(label, wall, runs)


def _show(m: Measured) -> None:
    print(f"  {m.label} ({m.wall:.1f} s wall):")
    for kind, sizes in sorted(m.runs.items()):
        chain = f"{len(sizes)} runs, largest {max(sizes, key=lambda s: s.events)}, all " if len(sizes) > 1 else ""
        print(f"    {kind:<22} {chain}{m.total(kind)}")


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--metrics", default="2,10", help="comma-separated metric counts to measure")
    p.add_argument("--look-hours", type=float, default=1.0, help="soak used to measure the cost of one look")
    p.add_argument("--long-hours", type=float, default=TARGET_HOURS,
                   help="the long soak to run (with the most metrics); below 48 the result is extrapolated to 48 h")
    p.add_argument("--budget", type=float, default=180.0,
                   help="seconds the long soak may take, estimated from the short one; beyond it a shorter soak runs")
    args = p.parse_args(argv)
    args.metrics = sorted(int(n) for n in args.metrics.split(","))
    return args


async def main(args: argparse.Namespace) -> None:
    env = await dev_server(*FAST_TIMERS, time_skipping=True, max_skips=1_000_000)
    fleet = SimulatedFleet(FleetScenario(min_samples=60))
    print(f"history benchmark on the time-skipping dev server ({FAST_TIMERS[1]}); soak checks every {LOOK_MINUTES:g} min; "
          f"goal <= {GOAL_EVENTS:,} events and <= {GOAL_BYTES // 2**20} MB per history")
    try:
        async with build_worker(env.client, AdapterRegistry.simulated(fleet), task_queue=QUEUE,
                                reports_dir="/tmp/bifrost-bench-reports"):
            print("per stage (3 regions x (test, prod), no soak):")
            stages = await measure(env.client, request(args.metrics[0], 0, regions=3), f"{args.metrics[0]} metrics, 6 stages")
            _show(stages)
            rollout = stages.total("rollout")
            one_stage = max((stages.total(k) for k in stages.runs if k.startswith("stage ")), key=lambda s: s.events)
            print(f"  -> the rollout's history grows by about {rollout.events / 6:.0f} events, {rollout.bytes / 6 / 1024:.1f} KB "
                  f"per stage; a stage's own history is {one_stage}")
            per_look: dict[int, Size] = {}
            look_wall = 0.0
            for n in args.metrics:
                base = await measure(env.client, request(n, 0), f"{n} metrics, no soak")
                soaked = await measure(env.client, request(n, args.look_hours), f"{n} metrics, {args.look_hours:g} h soak")
                looks = round(args.look_hours * 60 / LOOK_MINUTES)
                grown = soaked.total("stage us-east-1/prod")
                before = base.total("stage us-east-1/prod")
                per_look[n] = Size(round((grown.events - before.events) / looks), round((grown.bytes - before.bytes) / looks))
                look_wall = max(look_wall, (soaked.wall - base.wall) / looks)
                print(f"per soak look, {n} metrics ({looks} looks in a {args.look_hours:g} h soak):")
                _show(soaked)
                print(f"  -> {(grown.events - before.events) / looks:.1f} events, {(grown.bytes - before.bytes) / looks / 1024:.2f} KB "
                      f"per look (all runs of the prod stage, minus the same stage without soak); {look_wall * 1000:.0f} ms wall per look")
            n = args.metrics[-1]
            hours = args.long_hours
            target_looks = round(TARGET_HOURS * 60 / LOOK_MINUTES)
            if target_looks * look_wall > args.budget and hours >= TARGET_HOURS:
                hours = max(args.look_hours, round(args.budget / (1.5 * look_wall) * LOOK_MINUTES / 60, 1))  # looks get slower as the window grows
                # but long enough to cross the stage's history budget, so the run shows its continue-as-new
                crossing = STAGE_HISTORY_BUDGET * 1.25 / max(per_look[n].events, 1) * LOOK_MINUTES / 60
                hours = max(hours, round(crossing, 1))
                print(f"a {TARGET_HOURS:g} h soak would take about {target_looks * look_wall:.0f} s here (> {args.budget:.0f} s budget): "
                      f"running {hours:g} h and extrapolating")
            long = await measure(env.client, request(n, hours), f"{n} metrics, {hours:g} h soak")
            print(f"long soak, {n} metrics, {hours:g} h at {LOOK_MINUTES:g}-min looks:")
            _show(long)
    finally:
        await env.shutdown()

    kind, largest = long.largest()
    prod_runs = long.runs["stage us-east-1/prod"]
    if hours >= TARGET_HOURS:
        print(f"{TARGET_HOURS:g} h soak at {LOOK_MINUTES:g}-min looks, {n} metrics (run, not extrapolated): "
              f"largest single history is the {kind}: {largest}")
    elif len(prod_runs) > 1:
        print(f"{TARGET_HOURS:g} h soak, {n} metrics: the stage continued as new within the {hours:g} h run "
              f"({len(prod_runs)} runs), so its largest run is bounded; measured largest single history: {kind}: {largest}")
    else:
        extra = target_looks - round(hours * 60 / LOOK_MINUTES)
        largest = Size(prod_runs[0].events + extra * per_look[n].events, prod_runs[0].bytes + extra * per_look[n].bytes)
        kind = "stage us-east-1/prod"
        print(f"{TARGET_HOURS:g} h soak, {n} metrics (EXTRAPOLATED from the {hours:g} h run, one run, no continue-as-new): "
              f"the prod stage's history would be about {largest}")
    print(f"goal: <= {GOAL_EVENTS:,} events -> {largest.events:,} = {largest.events / GOAL_EVENTS:.2f} of the goal "
          f"({'met' if largest.events <= GOAL_EVENTS else 'NOT met'}); <= {GOAL_BYTES // 2**20} MB -> "
          f"{largest.bytes / 2**20:.2f} MB = {largest.bytes / GOAL_BYTES:.2f} of the goal "
          f"({'met' if largest.bytes <= GOAL_BYTES else 'NOT met'})")


if __name__ == "__main__":
    run_main(main(_args()))
