"""A safety floor on holds that promote on timeout (#29): `hold.on_timeout: promote` with `hold.timeout_minutes: 1s`
promoted a canary judged to fail a second after it held, and `bifrost plan` said nothing. The floor (default 60
min) is the platform's: the worker's own targets file (`policy.min_promote_hold_minutes`), read by the rollout
through an activity, so a rollout started by hand with any input meets the same floor; `bifrost plan` and `submit`
check it before anything is sent, and warn whenever a hold promotes on timeout. A failed canary promoted by a
timeout is audited and notified as such."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from temporalio.client import WorkflowFailureError

from activities.adapters.registry import registry_from_targets
from activities.adapters.simulated import SimulatedFleet
from activities.adapters.targets import parse_targets
from bifrost_cli.main import cli
from bifrost_cli.ops import outcome, outcome_state
from common.types import INVALID_REQUEST
from tests.workflows.helpers import fleet, running_worker, start
from tests.workflows.test_approvers import Recorder
from tests.workflows.test_hold import HELD_STAGE, held_request, slow_canary
from workflows.request import RolloutRequest

ONE_SECOND = 1 / 60


def request_file(tmp_path: Path, req: RolloutRequest) -> str:
    path = tmp_path / "request.yaml"
    path.write_text(yaml.safe_dump(req.model_dump(mode="json", exclude_none=True)))
    return str(path)


def targets_file(tmp_path: Path, floor: float) -> str:
    path = tmp_path / "targets.yaml"
    path.write_text(f"version: 1\npolicy: {{min_promote_hold_minutes: {floor}}}\n")
    return str(path)


def promoting(minutes: float) -> RolloutRequest:
    return held_request(hold={"timeout_minutes": minutes, "on_timeout": "promote"})


def test_plan_refuses_a_one_second_hold_that_promotes_naming_the_field_and_the_floor(tmp_path):
    res = CliRunner().invoke(cli, ["plan", request_file(tmp_path, promoting(ONE_SECOND))], catch_exceptions=False)
    assert res.exit_code == 2, res.output
    assert ("  - hold.timeout_minutes: 0.0166667 (1 s) is shorter than the platform's floor of 60 (60 min) for "
            "hold.on_timeout: promote") in res.output
    assert "Nothing was deployed." in res.output and "Traceback" not in res.output


def test_submit_refuses_it_before_anything_is_sent(tmp_path, monkeypatch):
    monkeypatch.setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")  # nothing listens: a refusal must come before connecting
    res = CliRunner().invoke(cli, ["submit", request_file(tmp_path, promoting(ONE_SECOND))], catch_exceptions=False)
    assert res.exit_code == 2, res.output
    assert "hold.timeout_minutes: 0.0166667 (1 s) is shorter than the platform's floor of 60" in res.output
    assert "could not reach Temporal" not in res.output


def test_plan_warns_loudly_whenever_a_hold_promotes_on_timeout(tmp_path):
    res = CliRunner().invoke(cli, ["plan", request_file(tmp_path, promoting(90))], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    warnings = [line for line in res.output.splitlines() if line.startswith("WARNING")]
    assert warnings == ["WARNING: hold.on_timeout is promote: a FAILED canary of us-east-1 that holds is PROMOTED if "
                        "nobody decides within 90 min (hold.timeout_minutes)"]
    quiet = CliRunner().invoke(cli, ["plan", request_file(tmp_path, held_request())], catch_exceptions=False)
    assert quiet.exit_code == 0 and "WARNING" not in quiet.output


def test_a_floor_raised_in_the_targets_file_applies_to_plan_and_submit(tmp_path):
    path, targets = request_file(tmp_path, promoting(90)), targets_file(tmp_path, 120)
    for command in ("plan", "submit"):
        res = CliRunner().invoke(cli, [command, path, "--targets", targets], catch_exceptions=False)
        assert res.exit_code == 2, res.output
        assert f"below the floors in {targets}" in res.output
        assert "hold.timeout_minutes: 90 (90 min) is shorter than the platform's floor of 120 (2 h)" in res.output
    assert registry_from_targets(parse_targets({"version": 1, "policy": {"min_promote_hold_minutes": 120}}),
                                 fleet=SimulatedFleet()).promote_hold_floor_minutes == 120


async def refused_at_once(client: Any, req: RolloutRequest, task_queue: str) -> str:
    """Start the rollout as a script or the UI would (no CLI), and return its refusal; it must come within seconds."""
    h = await start(client, req, task_queue)
    with pytest.raises(WorkflowFailureError) as err:
        async with asyncio.timeout(30):
            await h.result()
    cause = err.value.cause
    assert getattr(cause, "type", None) == INVALID_REQUEST, cause
    state = outcome_state(err.value)
    assert state is not None and state.status == "failed" and not state.stages
    return str(getattr(cause, "message", cause))


async def test_a_rollout_started_by_hand_below_the_floor_is_refused_at_once(env, task_queue, tmp_path):
    f = fleet(effects=[slow_canary()])
    async with running_worker(env.client, f, task_queue, tmp_path):
        message = await refused_at_once(env.client, promoting(ONE_SECOND), task_queue)
    assert message.startswith("invalid request: hold.timeout_minutes: 0.0166667 (1 s) is shorter than the platform's "
                              "floor of 60 (60 min) for hold.on_timeout: promote")
    assert f.calls == []  # nothing deployed


async def test_the_workers_raised_floor_applies_to_a_hand_started_rollout(env, task_queue, tmp_path):
    f = fleet(effects=[slow_canary()])
    async with running_worker(env.client, f, task_queue, tmp_path, promote_hold_floor_minutes=120):
        message = await refused_at_once(env.client, promoting(90), task_queue)
    assert "hold.timeout_minutes: 90 (90 min) is shorter than the platform's floor of 120 (2 h)" in message
    assert f.calls == []


async def test_a_hold_that_times_out_into_promote_at_the_floor_audits_and_notifies_the_failed_promotion(
        env, task_queue, tmp_path):
    """Real timers, with the platform's floor lowered to 3 s (its call, in the worker's targets file): the time-
    skipping server moves no clock while a child (the held stage) runs, so an hour's hold cannot be skipped there."""
    f = fleet(effects=[slow_canary()])
    notes = Recorder()
    async with running_worker(env.client, f, task_queue, tmp_path, promote_hold_floor_minutes=0.05, notifier=notes):
        result = await outcome(await start(env.client, promoting(0.05), task_queue))
    assert result.status == "succeeded", result.reason
    row = result.stage(HELD_STAGE)
    assert row is not None and row.verdict == "fail" and row.score is not None and row.version_now == "2.0.0"
    [decided] = [a for a in result.audit if a.action == "hold-promote"]
    assert decided.who == "bifrost"
    assert decided.detail.startswith(f"promoted a FAILED canary (score {row.score:g}, verdict fail) because the hold "
                                     "timed out after 3 s; no decision within 0.05 min")
    [urgent] = [n for n in notes.sent if n.event == "hold_promoted_failed"]
    assert urgent.text.startswith(f"URGENT: {HELD_STAGE}: promoted a FAILED canary") and urgent.hold == "failure"


async def test_a_hold_that_rolls_back_on_timeout_is_not_checked_against_the_floor(env, task_queue, tmp_path):
    f = fleet(effects=[slow_canary()])
    req = held_request(hold={"timeout_minutes": ONE_SECOND * 3, "on_timeout": "rollback"})
    async with running_worker(env.client, f, task_queue, tmp_path):
        result = await outcome(await start(env.client, req, task_queue))
    assert result.status == "rolled_back", result.reason

