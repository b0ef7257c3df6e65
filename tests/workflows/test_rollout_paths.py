"""Rollouts on a real Temporal dev server against the simulated fleet: good path, regressions, failures."""

from __future__ import annotations

from pathlib import Path

from workflows.plan import build_plan

from tests.workflows.helpers import fleet, make_request, running_worker, start


async def test_good_rollout_runs_stages_in_plan_order(env, task_queue, tmp_path: Path):
    req = make_request()
    f = fleet()
    async with running_worker(env.client, f, task_queue, tmp_path):
        handle = await start(env.client, req, task_queue)
        result = await handle.result()
    assert result.status == "succeeded", result.reason
    assert all(s.version_now == req.version for s in result.stages)
    promoted = [key for op, key, _ in f.calls if op == "promote"]
    assert promoted == [s.key for s in build_plan(req).stages()]
    assert all(v["primary"] == req.version for v in f.snapshot().values())
    assert all(v["canary"] is None and v["baseline"] is None for v in f.snapshot().values())
