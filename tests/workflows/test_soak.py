"""Soaks of hours on a time-skipping dev server: periodic checks, alarms mid-soak, a clean finish."""

from __future__ import annotations

from bifrost_cli.ops import outcome
from tests.workflows.helpers import fleet, make_request, running_worker, start


async def test_hours_long_soak_completes_with_periodic_checks(ts_env, task_queue, tmp_path):
    req = make_request(soak={"test_hours": 0, "prod_hours": 4}, canary={"soak_check_minutes": 120, "analysis_minutes": 15})
    f = fleet()
    async with running_worker(ts_env.client, f, task_queue, tmp_path):
        handle = await start(ts_env.client, req, task_queue)
        result = await outcome(handle)
    assert result.status == "succeeded", result.reason
    for stage in result.stages:
        hours = (stage.ended_at - stage.started_at).total_seconds() / 3600  # the stage's (virtual) clock
        if stage.environment == "prod":
            assert stage.soak_looks == 2  # 4 h soak, a check every 2 h
            assert hours >= 4.25  # 15 min analysis + 4 h soak
        else:  # no soak; its clock runs on while it waits for the verdict (it looks for its rollout every 5 min,
            # and time skipping jumps to each look), so its duration says nothing here
            assert stage.soak_looks == 0


async def test_alarm_during_soak_rolls_back(ts_env, task_queue, tmp_path):
    req = make_request(soak={"test_hours": 0, "prod_hours": 4}, canary={"soak_check_minutes": 60})
    f = fleet(effects=[{"version": req.version, "regions": ["us-east-1"], "environments": ["prod"],
                        "error_factor": 6, "only_after_promotion": True}])
    async with running_worker(ts_env.client, f, task_queue, tmp_path):
        result = await outcome(await start(ts_env.client, req, task_queue))
    stages = {s.key: s for s in result.stages}
    assert result.status == "rolled_back"
    assert stages["us-east-1/prod"].verdict == "pass"  # the canary looked fine before promotion
    assert "alarm during soak" in stages["us-east-1/prod"].reason
    assert all(s.version_now == "1.0.0" for s in result.stages)
