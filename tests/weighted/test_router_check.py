"""A weighted rollout whose stages' targets lack its router is refused by the rollout itself before anything is
deployed: the check reads the worker's targets file, so a run started by hand (no `bifrost plan --targets`) meets
it too."""

from __future__ import annotations

from common.types import INVALID_REQUEST
from tests.workflows.helpers import METRICS, failed_at_once, fleet, make_request, running_worker, start


async def test_a_router_the_targets_do_not_configure_is_refused_before_any_deploy(env, task_queue, tmp_path):
    f = fleet()
    req = make_request(canary={"metrics": METRICS, "analysis_minutes": 1, "interval_seconds": 1,
                               "judge": {"min_samples": 30},
                               "traffic": {"router": "gateway-api", "steps": [10, 25]}})
    async with running_worker(env.client, f, task_queue, tmp_path):
        handle = await start(env.client, req, task_queue)
        cause = await failed_at_once(handle, INVALID_REQUEST)
    assert "canary.traffic.router: gateway-api" in cause.message, cause.message
    assert "us-east-1/prod" in cause.message or "us-east-1/test" in cause.message
    assert [e for e in f.effects if e.service == req.service] == []  # nothing deployed, scaled or weighted
    assert [c for c in f.calls if c[0] == "deploy"] == []
