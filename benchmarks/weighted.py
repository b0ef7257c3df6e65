"""Weighted canary steps (canary.traffic): detection at a 5% first step, and how fast a failing step is withdrawn.

Run: .venv/bin/python benchmarks/weighted.py [--seed 34] [--stages 2000] [--workers 2] [--skip-server]

1. Detection (pure, no server): one stage (the first of a six-stage rollout) with steps 5% → 25% → 50% and the
   baseline at the canary's share. Each step is judged as the stage workflow judges it: canary.sequential.decide
   on a window begun at the step, the stage's canary budget split evenly between the steps, extensions as the
   judge asks, and a step whose arms have too few samples to test waits for more (at most 10 windows). An arm's
   samples per 60-interval window follow its share as in the simulated fleet (one per interval from 20% up, a
   quarter at 5%). Goals: a good release passes all steps >= 99.5%; +20% latency in one of ten metrics is caught
   by the end of the steps >= 95%.
2. Decision to weight 0 (a dev server, the simulated fleet, a failing canary): workflow tasks and router calls
   from the failing verdict to weight 0, and the time, against one server hop (a no-op activity in sequence).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from judge_rollout import SAMPLES, TEN, clopper, lognormal  # noqa: E402

from canary.config import JudgeConfig, MetricSamples, StagePlace  # noqa: E402
from canary.sequential import decide  # noqa: E402
from common.traffic.canary import CanaryTraffic  # noqa: E402

STEPS = CanaryTraffic(router="simulated", steps=[5, 25, 50], baseline_share="same")
FULL_SHARE = 20.0  # FleetScenario.full_sample_share
MAX_DATA_WAITS = 10  # workflows/stage/judge.py
NO_DATA = {"Nodata", "NodataFailMetric", "Error"}
PLACE = StagePlace(index=0, stages=6)
REGRESSED = {"latency_0": lognormal(100 * 1.2, 0.25)}


def arm_samples(share: int) -> int:
    return math.floor(SAMPLES * min(1.0, share / FULL_SHARE))


def stage(args: tuple[bool, int, int]) -> tuple[bool, int]:
    """One weighted stage: (passed every step, the step it failed at or 0)."""
    bad, seed, i = args
    rng = np.random.default_rng([seed, i, int(bad)])
    n = len(STEPS.steps)
    base = JudgeConfig()
    config = base.model_copy(update={"alpha": base.alpha / n, "rollout_alpha": base.rollout_alpha / n})
    for k, share in enumerate(STEPS.steps):
        m = arm_samples(share)
        data = {s.name: ([], []) for s in TEN.specs}  # type: ignore[var-annotated]
        look, waits = 1, 0
        while True:
            for spec in TEN.specs:
                draw_new = REGRESSED.get(spec.name, TEN.healthy[spec.name]) if bad else TEN.healthy[spec.name]
                data[spec.name][0].extend(TEN.healthy[spec.name](rng, m))
                data[spec.name][1].extend(draw_new(rng, m))
            samples = [MetricSamples(name=name, baseline=list(b), canary=list(c)) for name, (b, c) in data.items()]
            d = decide(config, TEN.specs, samples, place=PLACE, look=look)
            if d.result.verdict == "insufficient_data" and waits < MAX_DATA_WAITS:
                waits += 1
                tested = any(r.classification not in NO_DATA for r in d.result.metrics)
                if not tested or look < d.max_looks:
                    look += 1 if tested else 0
                    continue
            if d.action == "extend" and look < d.max_looks:
                look += 1
                continue
            if d.action != "pass":
                return False, k + 1
            break
    return True, 0


def detection(seed: int, stages: int, workers: int) -> None:
    jobs_good = [(False, seed, i) for i in range(stages)]
    jobs_bad = [(True, seed, i) for i in range(max(1, stages // 2))]
    with ProcessPoolExecutor(workers) as pool:
        good = list(pool.map(stage, jobs_good, chunksize=16))
        bad = list(pool.map(stage, jobs_bad, chunksize=16))
    passed = sum(ok for ok, _ in good)
    caught = sum(not ok for ok, _ in bad)
    at = [sum(1 for ok, k in bad if not ok and k == s + 1) for s in range(len(STEPS.steps))]
    print(f"steps {STEPS.line()}; samples per arm per window {[arm_samples(s) for s in STEPS.steps]} of {SAMPLES}; "
          f"seed {seed}")
    lo_good = _low(passed, len(good))
    lo_bad = _low(caught, len(bad))
    print(f"  good release passes all steps: {clopper(passed, len(good))}; goal >= 99.5%: "
          f"{'met' if lo_good >= 0.995 or passed / len(good) >= 0.995 else 'NOT met'}")
    print(f"  +20% latency in one of ten caught by the end of the steps: {clopper(caught, len(bad))} "
          f"(at step 1/2/3: {at}); goal >= 95%: {'met' if caught / len(bad) >= 0.95 else 'NOT met'}"
          f"{'' if lo_bad >= 0.95 else ' (the interval reaches below the goal)'}")


def _low(k: int, n: int) -> float:
    from scipy.stats import beta

    return 0.0 if k == 0 else float(beta.ppf(0.025, k, n - k + 1))


async def withdrawal(runs: int) -> None:
    from histories import dev_server, stage_client
    from orchestration import HopWorkflow, bench_noop
    from temporalio.api.enums.v1 import EventType
    from temporalio.worker import UnsandboxedWorkflowRunner, Worker

    from activities.adapters.registry import AdapterRegistry
    from activities.adapters.reports import NoReports
    from activities.adapters.simulated import FleetScenario, SimulatedFleet, VersionEffect
    from bifrost_cli.ops import outcome, start_rollout
    from worker.build import build_worker
    from workflows.request import parse_request

    env = await dev_server()
    queue = f"bench-{uuid.uuid4().hex[:6]}"
    fleet = SimulatedFleet(FleetScenario(min_samples=60, effects=[VersionEffect(version="6.6.6", latency_factor=1.6)]))
    rows: list[tuple[int, int, float]] = []
    try:
        async with build_worker(env.client, AdapterRegistry.simulated(fleet), task_queue=queue,
                                reports_dir="/tmp/bifrost-bench-reports", reports=NoReports()):
            for i in range(runs):
                req = parse_request({
                    "service": f"wbench-{i}", "version": "6.6.6", "requested_by": "bench",
                    "regions": [{"name": "us-east-1", "environments": ["test"]}],
                    "canary": {"metrics": [{"name": "latency_p99", "kind": "latency"}], "analysis_minutes": 0.02,
                               "judge": {"min_samples": 10}, "traffic": {"router": "simulated", "steps": [5, 25, 50]}},
                    "soak": {"test_hours": 0, "prod_hours": 0}})
                handle = await start_rollout(env.client, req, queue)
                result = await outcome(handle)
                assert result.status == "rolled_back", result.reason
                stage = stage_client(env.client).get_workflow_handle(f"{handle.id}/us-east-1/test")  # machinery namespace
                events = [e async for e in stage.fetch_history_events()]
                names = {e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name for e in events
                         if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED}
                done = [e for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED]
                verdict = [e for e in done if names[e.activity_task_completed_event_attributes.scheduled_event_id]
                           == "analyze_canary"][-1]
                withdraw = next(e for e in done if e.event_id > verdict.event_id and names[
                    e.activity_task_completed_event_attributes.scheduled_event_id] == "set_canary_weights")
                scheduled = withdraw.activity_task_completed_event_attributes.scheduled_event_id
                tasks = sum(1 for e in events if verdict.event_id < e.event_id < scheduled
                            and e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
                started = next(e for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
                               and e.activity_task_started_event_attributes.scheduled_event_id == scheduled)
                calls = started.activity_task_started_event_attributes.attempt
                seconds = withdraw.event_time.ToDatetime().timestamp() - verdict.event_time.ToDatetime().timestamp()
                rows.append((tasks, calls, seconds))
        async with Worker(env.client, task_queue=queue + "-hop", workflows=[HopWorkflow], activities=[bench_noop],
                          workflow_runner=UnsandboxedWorkflowRunner()):
            hop_id = f"hop-{uuid.uuid4().hex[:6]}"
            await env.client.execute_workflow(HopWorkflow.run, 30, id=hop_id, task_queue=queue + "-hop")
        hist = [e async for e in env.client.get_workflow_handle(hop_id).fetch_history_events()]
        span = hist[-1].event_time.ToDatetime().timestamp() - hist[0].event_time.ToDatetime().timestamp()
        hop = span / 30
    finally:
        await env.shutdown()
        fleet.close()
    secs = sorted(s for _, _, s in rows)
    median = secs[len(secs) // 2]
    tasks_max, calls_max = max(t for t, _, _ in rows), max(c for _, c, _ in rows)
    print(f"decision to weight 0 ({runs} failing weighted stages, dev server, simulated router): workflow tasks "
          f"from the verdict to the withdrawal's scheduling {tasks_max} at most (goal 1, the task that reads the "
          f"verdict: {'met' if tasks_max == 1 else 'NOT met'}); router calls {calls_max} "
          f"({'met' if calls_max == 1 else 'NOT met'}); verdict to weight 0: median {median * 1000:.1f} ms, "
          f"max {secs[-1] * 1000:.1f} ms; one server hop {hop * 1000:.1f} ms; ratio {median / hop:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=34)
    ap.add_argument("--stages", type=int, default=2000, help="good stages (the regressed ones are half as many)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--runs", type=int, default=10, help="failing weighted stages on the dev server")
    ap.add_argument("--skip-server", action="store_true")
    a = ap.parse_args()
    detection(a.seed, a.stages, a.workers)
    if not a.skip_server:
        asyncio.run(withdrawal(a.runs))


if __name__ == "__main__":
    main()
