"""`bifrost guard`: help that teaches, bad input refused with exit 2 naming the field, and a round on a dev server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from click.testing import CliRunner

from bifrost_cli import guard as guard_cli
from bifrost_cli.main import cli
from tests.cli.test_cli import _closed_port
from tests.workflows.evacuation_helpers import running_worker, service
from tests.workflows.test_guard import fleet_with, wait_for
from workflows.guard.models import ApproveGuard, StopGuard, guard_id


def run(*args: str, env: dict | None = None) -> Any:
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def test_help_teaches_with_examples_and_exit_codes() -> None:
    out = run("guard", "--help").output
    assert "bifrost guard start payments --mode propose" in out and "never evacuates the last serving region" in out
    assert "3  a guard of this service is already running" in out
    start = run("guard", "start", "--help").output
    assert "--quiet DAYS@HH:MM-HH:MM" in start and "--slo METRIC=LIMIT" in start and "--max-evacuated" in start
    assert "guard" in run("--help").output


@pytest.mark.parametrize("args, words", [
    (["--max-evacuated", "0"], "rules.max_evacuated: Input should be greater than or equal to 1"),
    (["--steps", "10,50"], "steps: levels must strictly decrease"),
    (["--window", "6"], "window_seconds: 6 s holds fewer than judge.min_samples"),
    (["--timezone", "Mars/Olympus"], "rules.timezone: unknown IANA time zone"),
    (["--quiet", "mon-fri@10:00-09:00"], "start (10:00:00) must be before end"),
    (["--slo", "error_rate"], "judge.slo.error_rate: Input should be a finite number"),
])
def test_bad_input_exits_2_before_contacting_temporal(args: list[str], words: str) -> None:
    res = run("guard", "start", "payments", *args, env={"TEMPORAL_ADDRESS": f"127.0.0.1:{_closed_port()}"})
    assert res.exit_code == 2, res.output
    assert words in res.output


def test_quiet_window_syntax() -> None:
    assert guard_cli.quiet_window("mon-wed,sat@09:00-10:00") == {"days": ["mon", "tue", "wed", "sat"],
                                                                 "start": "09:00", "end": "10:00"}
    res = run("guard", "start", "payments", "--quiet", "someday@09:00-10:00")
    assert res.exit_code == 2 and "days: use mon,tue" in res.output


async def test_start_status_approve_and_stop_against_a_dev_server(env: Any, task_queue: str, tmp_path: Any,
                                                                   monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", env.client.service_client.config.target_host)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", env.client.namespace)
    registry, _ = fleet_with({"eu-west-1": 3.0})
    svc = service()
    inp = guard_cli.guard_input({
        "service": svc, "requested_by": "alice", "look_interval_seconds": 1, "window_seconds": 60,
        "sample_interval_seconds": 1, "steps": [0], "evacuation_health_interval_seconds": 1,
        "evacuation_min_samples": 1, "rules": {"mode": "propose"}})
    async with running_worker(env.client, registry, task_queue, tmp_path):
        assert await guard_cli.start_guard(inp, task_queue) == 0
        assert f"started {guard_id(svc)}: mode propose" in capsys.readouterr().out
        with pytest.raises(SystemExit) as again:
            await guard_cli.start_guard(inp, task_queue)
        assert again.value.code == 3 and "already running" in capsys.readouterr().err
        handle = env.client.get_workflow_handle(guard_id(svc))
        await wait_for(handle, lambda s: bool(s.proposals))
        assert await guard_cli.show_guard(svc, as_json=False) == 0
        out = capsys.readouterr().out
        assert "awaiting_approval" in out and "proposal: evacuate eu-west-1" in out
        assert f"approve: bifrost guard approve {svc} eu-west-1" in out and "ready" in out
        res = await guard_cli.send(svc, "approve", ApproveGuard(region="eu-west-1", approver="bob"), workflow_id=guard_id(svc))
        assert res == 0 and "approved by bob" in capsys.readouterr().out
        state = await wait_for(handle, lambda s: any(d.action == "evacuated" for d in s.decisions))
        assert state.weights["eu-west-1"] == 0
        with pytest.raises(SystemExit) as refused:
            await guard_cli.send(svc, "approve", ApproveGuard(region="eu-west-1", approver="bob"), workflow_id=guard_id(svc))
        assert refused.value.code == 1 and "no proposal for eu-west-1" in capsys.readouterr().err
        assert await guard_cli.send(svc, "stop", StopGuard(by="alice", reason="done"), workflow_id=guard_id(svc)) == 0
        async with asyncio.timeout(60):
            final = await handle.result()
        assert final["status"] == "stopped"
