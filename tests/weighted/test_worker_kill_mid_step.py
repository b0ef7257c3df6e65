"""A `bifrost worker` is SIGKILLed in the middle of a weighted canary step; a second one on the same fleet finishes.

The router's weights (kept in the fleet's state) show every write: each stage's planned steps once, in order, then
weight 0, and no weight the plan did not contain, whatever the kill interrupted.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from activities.adapters.simulated import SimulatedFleet
from tests.worker_processes import WorkerProcesses
from tests.workflows.helpers import make_request, start
from workflows.plan import build_plan

PLANNED = [{"primary": 90, "canary": 5, "baseline": 5}, {"primary": 50, "canary": 25, "baseline": 25}]
WITHDRAWN = {"primary": 100, "canary": 0, "baseline": 0}


async def test_a_worker_killed_mid_step_leaves_no_unplanned_weight(env, tmp_path: Path, task_queue: str):
    scenario, db = tmp_path / "fleet.yaml", tmp_path / "fleet.db"
    scenario.write_text("initial_version: 1.0.0\nmin_samples: 60\nfresh_draws: false\n")
    req = make_request(
        regions=[{"name": "ap-south-1", "traffic_share": 0.4}, {"name": "us-east-1", "traffic_share": 0.6}],
        canary={"analysis_minutes": 0.1, "judge": {"min_samples": 10},  # 6 s per step window: the kill lands in one
                "traffic": {"router": "simulated", "steps": [5, 25]}},
    )
    stages = [s.key for s in build_plan(req).stages()]
    workers = WorkerProcesses(env.client, task_queue, tmp_path, "--fleet", str(scenario), "--fleet-db", str(db),
                              "--no-reports")
    fleet = SimulatedFleet(state_file=db)

    def writes(key: str) -> list[dict[str, int]]:
        return [e.after for e in fleet.effects if e.field == "weights" and e.stage_key == key]

    try:
        first = workers.start("worker-1")
        handle = await start(env.client, req, task_queue)
        # the kill lands in the second stage's first step: its 5% weights are in force, its window is running
        await workers.until(f"{stages[1]}'s first step", lambda: writes(stages[1]) == PLANNED[:1], 120)
        assert workers.kill(first) == -signal.SIGKILL
        assert writes(stages[1]) == PLANNED[:1]  # killed mid-step

        second = workers.start("worker-2")
        result = await asyncio.wait_for(handle.result(), timeout=240)
        assert second.poll() is None
        assert result.status == "succeeded", result.reason
        for key in stages:  # each planned step once, in order, then weight 0: nothing else was ever written
            assert writes(key) == [*PLANNED, WITHDRAWN], (key, writes(key))
        by_pid = [e.pid for e in fleet.effects if e.field == "weights" and e.stage_key == stages[1]]
        assert by_pid[0] == first.pid and set(by_pid[1:]) == {second.pid}
        rows = {s.key: s for s in result.stages}
        assert all(rows[k].canary_step == 2 and rows[k].withdrawn_at is not None for k in stages)
    finally:
        workers.stop()
        fleet.close()
