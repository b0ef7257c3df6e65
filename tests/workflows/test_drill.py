"""Drills (issue #19 item 4): each region evacuated and restored in turn and the outcome recorded; skipped in a blocked
window; `bifrost drill schedule` creates a Temporal Schedule that starts DrillWorkflow."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

from bifrost_cli import drill as drill_cli
from tests.workflows.evacuation_helpers import running_worker, service
from tests.workflows.test_guard import fleet_with
from workflows import search
from workflows.drill.models import DrillInput, DrillReport, drill_id
from workflows.drill.workflow import DrillWorkflow

DRILL_DEADLINE = 120.0  # a drill that does not end fails its test instead of hanging the suite


async def bounded(aw: Any) -> Any:
    async with asyncio.timeout(DRILL_DEADLINE):
        return await aw


ALL_WEEK = {"days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"], "start": "00:00", "end": "23:59"}


def drill_input(svc: str, **overrides: Any) -> DrillInput:
    data: dict[str, Any] = {"service": svc, "requested_by": "alice", "regions": ["eu-west-1", "ap-south-1"],
                            "hold_minutes": 0, "steps": [50, 0], "health_interval_seconds": 1, "min_samples": 1}
    data.update(overrides)
    return DrillInput.model_validate(data)


async def test_a_drill_evacuates_and_restores_each_region_in_turn(env: Any, tmp_path: Path) -> None:
    svc, tq = service(), f"tq-{uuid.uuid4().hex[:8]}"
    registry, _ = fleet_with({})
    async with running_worker(env.client, registry, tq, tmp_path):
        report: DrillReport = await bounded(env.client.execute_workflow(
            DrillWorkflow.run, drill_input(svc), id=f"drill/{svc}/1", task_queue=tq))
        assert report.outcome == "drilled", report
        # the drill has a page of its own: search attributes (found by BifrostService) and Current Details
        handle = env.client.get_workflow_handle(f"drill/{svc}/1")
        attrs = (await handle.describe()).typed_search_attributes
        assert (attrs.get(search.SERVICE), attrs.get(search.STATUS), attrs.get(search.REQUESTED_BY)) == (svc, "drilled", "alice")
        meta = await handle.query("__temporal_workflow_metadata")
        details = meta.current_details if hasattr(meta, "current_details") else meta["currentDetails"]
        assert f"## Drill of {svc} (prod) — **drilled**" in details and "**eu-west-1**: evacuation evacuated" in details, details
        assert [r.region for r in report.regions] == ["eu-west-1", "ap-south-1"]
        for r in report.regions:
            assert r.evacuation.startswith("evacuated") and r.restore.startswith("restored") and not r.refused
            assert r.drain_seconds is not None and r.drain_seconds >= 0 and len(r.receivers_health) == 2
        router = registry.traffic_target("eu-west-1", "prod").router_for(svc)  # type: ignore[union-attr]
        assert await router.weights() == {"us-east-1": 100, "eu-west-1": 100, "ap-south-1": 100}


async def test_a_drill_in_a_blocked_window_is_skipped_and_changes_nothing(env: Any, tmp_path: Path) -> None:
    svc, tq = service(), f"tq-{uuid.uuid4().hex[:8]}"
    registry, fleet = fleet_with({})
    async with running_worker(env.client, registry, tq, tmp_path):
        report: DrillReport = await bounded(env.client.execute_workflow(
            DrillWorkflow.run, drill_input(svc, blocked_windows=[ALL_WEEK]), id=f"drill/{svc}/1", task_queue=tq))
    assert report.outcome == "skipped" and "blocked window" in report.reason and not report.regions
    assert not [e for e in fleet.effects if e.service == svc]


async def test_a_refused_region_is_recorded_and_the_drill_fails(env: Any, tmp_path: Path) -> None:
    svc, tq = service(), f"tq-{uuid.uuid4().hex[:8]}"
    registry, _ = fleet_with({})
    async with running_worker(env.client, registry, tq, tmp_path):
        report: DrillReport = await bounded(env.client.execute_workflow(
            DrillWorkflow.run, drill_input(svc, regions=["mars-1", "eu-west-1"]), id=f"drill/{svc}/1", task_queue=tq))
    assert report.outcome == "failed" and "mars-1" in report.reason
    assert "has no traffic target" in report.regions[0].refused[0]
    assert report.regions[1].restore.startswith("restored")  # the next region is still drilled


async def test_schedule_creates_a_temporal_schedule(env: Any, monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", env.client.service_client.config.target_host)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", env.client.namespace)
    svc = service()
    inp = drill_input(svc, blocked_windows=[ALL_WEEK])
    assert await drill_cli.schedule_drill(inp, cron="0 10 * * TUE", every_hours=None, task_queue="drills") == 0
    assert f"scheduled {drill_id(svc)}: cron '0 10 * * TUE'" in capsys.readouterr().out
    try:
        described = await env.client.get_schedule_handle(drill_id(svc)).describe()
        action = described.schedule.action
        assert action.workflow == "DrillWorkflow" and action.task_queue == "drills"  # type: ignore[attr-defined]
        calendar = described.schedule.spec.calendars[0]  # the server keeps a cron as a calendar
        assert calendar.hour[0].start == 10 and calendar.day_of_week[0].start == 2
        with pytest.raises(SystemExit) as again:
            await drill_cli.schedule_drill(inp, cron=None, every_hours=24, task_queue="drills")
        assert again.value.code == 3
    finally:
        assert await drill_cli.unschedule_drill(svc) == 0


def test_drill_cli_refuses_bad_input() -> None:
    from click.testing import CliRunner

    from bifrost_cli.main import cli

    res = CliRunner().invoke(cli, ["drill", "schedule", "payments", "--regions", "eu-west-1", "--steps", "10,50"])
    assert res.exit_code == 2 and "steps" in res.output
    res = CliRunner().invoke(cli, ["drill", "schedule", "payments", "--regions", "eu-west-1", "--hold", "-1"])
    assert res.exit_code == 2 and "hold_minutes" in res.output
    assert "bifrost drill schedule payments" in CliRunner().invoke(cli, ["drill", "--help"]).output


async def test_a_drill_while_a_rollout_holds_the_lock_is_skipped(env: Any, tmp_path: Path) -> None:
    from bifrost_cli.ops import start_rollout
    from tests.workflows.helpers import make_request
    from workflows.rollout.workflow import RolloutWorkflow

    svc, tq = service(), f"tq-{uuid.uuid4().hex[:8]}"
    registry, fleet = fleet_with({})
    # a real rollout holds the lock, waiting at an approval gate (a lock started by hand with a holder fails at once)
    req = make_request(service=svc, regions=[{"name": "eu-west-1", "traffic_share": 1.0}],
                       blast_radius={"canary_region": None},
                       approvals={"gates": [{"stage": "eu-west-1/test"}], "approvers": ["alice"]})
    async with running_worker(env.client, registry, tq, tmp_path):
        rollout = await start_rollout(env.client, req, tq)
        try:
            async with asyncio.timeout(30):
                while (await rollout.query(RolloutWorkflow.status)).status != "awaiting_approval":
                    await asyncio.sleep(0.1)
            report: DrillReport = await bounded(env.client.execute_workflow(
                DrillWorkflow.run, drill_input(svc), id=f"drill/{svc}/1", task_queue=tq))
        finally:
            await rollout.terminate("test over")
    assert report.outcome == "skipped" and f"rollout/{svc}/2.0.0" in report.reason and not report.regions
    assert not [e for e in fleet.effects if e.service == svc]  # the gate holds the rollout before it deploys


def test_a_drill_refuses_an_unknown_time_zone_naming_the_field() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as err:
        drill_input("payments", timezone="Mars/Olympus")
    assert "timezone" in str(err.value) and "unknown IANA time zone 'Mars/Olympus'" in str(err.value)
