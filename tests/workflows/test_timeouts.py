"""Waits of hours and days on a time-skipping dev server: approval timeouts and deployment windows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bifrost_cli.ops import outcome
from tests.workflows.helpers import fleet, make_request, running_worker, start


async def test_unanswered_approval_times_out_after_its_hours(ts_env, task_queue, tmp_path):
    # The gate is on the first wave: the dev server skips a workflow's time only while it has no open child
    # workflows, and stages that finished their work stay open until the rollout's verdict.
    req = make_request(approvals={"gates": [{"wave": 1}], "timeout_hours": 72})
    f = fleet()
    async with running_worker(ts_env.client, f, task_queue, tmp_path):
        result = await outcome(await start(ts_env.client, req, task_queue))
    assert result.status == "rejected"
    assert "approval of wave 1 (wave-1) timed out after 72 h" in result.reason
    timeout = next(a for a in result.audit if a.action == "approval-timeout")
    granted = next(a for a in result.audit if a.action == "lock-granted")
    assert timeout.at - granted.at >= timedelta(hours=72)
    assert f.calls == [] or all(op == "rollback" for op, _, _ in f.calls)  # nothing was deployed
    assert all(s.version_now == "1.0.0" and s.status == "pending" for s in result.stages)


async def test_an_approval_timeout_rolls_back_the_waves_before_it(env, task_queue, tmp_path):
    req = make_request(approvals={"gates": [{"stage": "us-east-1/prod"}], "timeout_hours": 0.0015})  # 5.4 s
    f = fleet()
    async with running_worker(env.client, f, task_queue, tmp_path):
        result = await outcome(await start(env.client, req, task_queue))
    stages = {s.key: s for s in result.stages}
    assert result.status == "rejected" and "approval of wave 4" in result.reason
    assert not [c for c in f.calls if c[1] == "us-east-1/prod"]  # the gated stage never started
    for key in ("ap-south-1/test", "ap-south-1/prod", "us-east-1/test"):  # finished, then rolled back on their pages
        assert stages[key].status == "rolled_back" and "rolled back by the rollout (scope all)" in stages[key].reason
    assert all(s.version_now == "1.0.0" for s in result.stages)


async def test_a_stage_waits_for_its_window_to_open(ts_env, task_queue, tmp_path):
    now = datetime.now(UTC)
    # a window of one hour starting four hours from now, on every day
    start_t = (now + timedelta(hours=4)).replace(minute=0, second=0, microsecond=0)
    if start_t.hour == 23:  # windows do not cross midnight
        start_t -= timedelta(hours=2)
    end_t = start_t + timedelta(hours=1)
    window = {"days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"],
              "start": start_t.strftime("%H:%M"), "end": end_t.strftime("%H:%M")}
    req = make_request(regions=[{"name": "us-east-1", "traffic_share": 1.0, "environments": ["prod"], "windows": [window]}],
                       blast_radius={"canary_region": None})
    async with running_worker(ts_env.client, fleet(), task_queue, tmp_path):
        result = await outcome(await start(ts_env.client, req, task_queue))
    assert result.status == "succeeded", result.reason
    stage = result.stages[0]
    assert stage.launched_at is not None  # by the rollout's clock (a stage started through Nexus has its own)
    opened = stage.launched_at.astimezone(UTC)
    assert opened.strftime("%H:%M") >= window["start"] and opened.strftime("%H:%M") < window["end"]
    assert opened - now >= timedelta(hours=1)  # it really waited (virtual time) for the window
