"""Traffic inside rollouts: a failing production stage with `on_failure: evacuate` moves its region's traffic
away first, rolls back, and returns the traffic step by step once the rolled-back version is healthy."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client
from temporalio.service import RPCError

from bifrost_cli.ops import outcome
from bifrost_cli.traffic import traffic_moves
from tests.workflows.evacuation_helpers import evacuation, running_worker, simulated_registry
from tests.workflows.helpers import make_request, start
from worker.endpoints import machinery_client
from workflows import search
from workflows.evacuation.settings import evacuation_id
from workflows.evacuation.workflow import EvacuationWorkflow
from workflows.request import RequestError, parse_request
from workflows.rollout.models import RolloutState
from workflows.rollout.workflow import RolloutWorkflow

EVEN = {"us-east-1": 100, "eu-west-1": 100, "ap-south-1": 100}
FAST = {"steps": [50, 0], "health_check_minutes": 0.02, "health_interval_seconds": 1, "min_samples": 3}


def _request(on_failure: str = "evacuate", **overrides: Any):
    regions = [{"name": "us-east-1", "traffic_share": 0.5}, {"name": "eu-west-1", "traffic_share": 0.3, "on_failure": on_failure},
               {"name": "ap-south-1", "traffic_share": 0.2}]
    return make_request(regions=regions, evacuation=FAST, **overrides)


async def test_a_failing_prod_canary_evacuates_rolls_back_and_restores(env, task_queue, tmp_path):
    registry, fleet = simulated_registry()
    req = _request()
    fleet.scenario.effects.append(_regression(req.version, "eu-west-1"))
    async with running_worker(env.client, registry, task_queue, tmp_path):
        result = await outcome(await start(env.client, req, task_queue))
        moves = await traffic_moves(env.client, req.service)
        assert None not in moves, moves  # every run ended with its state
    stage = {s.key: s for s in result.stages}["eu-west-1/prod"]
    assert result.status == "rolled_back"
    assert stage.status == "rolled_back" and stage.version_now == "1.0.0"
    assert "evacuated eu-west-1 first" in stage.reason and "traffic restored" in stage.reason, stage.reason
    assert [(m.direction, m.status) for m in moves] == [("evacuate", "evacuated"), ("restore", "restored")]
    evacuated, restored = moves
    assert evacuated.weights_before == EVEN and evacuated.weights_after["eu-west-1"] == 0
    assert restored.weights_after == EVEN  # every region serves as before
    # the order of the mitigation: the traffic left before the rollback, and came back after it
    assert evacuated.ended_at is not None and restored.started_at is not None
    rolled = [i for i, (op, key, _) in enumerate(fleet.calls) if op == "rollback" and key == "eu-west-1/prod"]
    scaled = [i for i, (op, key, _) in enumerate(fleet.calls) if op == "scale"]
    assert rolled and scaled and min(scaled) < rolled[0], fleet.calls  # receivers pre-warmed before the rollback


async def test_a_stage_without_the_policy_only_rolls_back(env, task_queue, tmp_path):
    registry, fleet = simulated_registry()
    req = _request(on_failure="rollback")
    fleet.scenario.effects.append(_regression(req.version, "eu-west-1"))
    async with running_worker(env.client, registry, task_queue, tmp_path):
        result = await outcome(await start(env.client, req, task_queue))
        moves = await traffic_moves(env.client, req.service)
        assert None not in moves, moves  # every run ended with its state
    assert result.status == "rolled_back" and moves == []
    assert not [c for c in fleet.calls if c[0] == "scale"]


async def test_a_region_that_cannot_be_evacuated_still_rolls_back(env, task_queue, tmp_path):
    registry, fleet = simulated_registry(regions=("us-east-1", "ap-south-1"))  # eu-west-1 has no traffic target
    req = _request()
    fleet.scenario.effects.append(_regression(req.version, "eu-west-1"))
    async with running_worker(env.client, registry, task_queue, tmp_path):
        result = await outcome(await start(env.client, req, task_queue))
    stage = {s.key: s for s in result.stages}["eu-west-1/prod"]
    assert result.status == "rolled_back" and stage.status == "rolled_back" and stage.version_now == "1.0.0"
    assert "could not evacuate eu-west-1" in stage.reason and "rolled back without evacuating" in stage.reason


@pytest.mark.parametrize("change, words", [
    ({"regions": [{"name": "us-east-1", "traffic_share": 1.0}, {"name": "eu-west-1", "environments": ["test"],
                                                                 "on_failure": "evacuate"}]},
     "regions.eu-west-1.on_failure: only a production stage carries traffic to evacuate"),
    ({"regions": [{"name": "us-east-1", "traffic_share": 1.0, "on_failure": "evacuate"}]},
     "evacuate needs another production region"),
    ({"evacuation": {"steps": [30, 60, 0]}}, "evacuation.steps: levels must strictly decrease"),
    ({"evacuation": {"health_check_minutes": 0}}, "evacuation.health_check_minutes"),
])
def test_evacuation_settings_are_checked_before_anything_runs(change, words):
    data = _request().model_dump(mode="json", exclude_defaults=True, by_alias=True)
    data.update(change)
    with pytest.raises(RequestError) as err:
        parse_request(data)
    assert words in str(err.value)


def _regression(version: str, region: str) -> Any:
    from activities.adapters.simulated import VersionEffect

    return VersionEffect(version=version, regions=[region], environments=["prod"], latency_factor=1.6)


@pytest.mark.parametrize("decision", ["retry", "rollback"])
async def test_evacuate_and_hold_moves_the_traffic_away_holds_and_returns_it_after_the_decision(env, task_queue, tmp_path,
                                                                                                 decision):
    from tests.workflows.test_controls import wait_for
    from workflows.rollout.updates import ResolveHold
    from workflows.rollout.workflow import RolloutWorkflow

    registry, fleet = simulated_registry()
    req = _request(on_failure="evacuate_and_hold")
    fleet.scenario.effects.append(_regression(req.version, "eu-west-1"))
    async with running_worker(env.client, registry, task_queue, tmp_path):
        h = await start(env.client, req, task_queue)
        state = await wait_for(h, lambda s: s.status == "held", timeout=120)
        row = state.stage("eu-west-1/prod")
        assert row is not None and row.status == "held" and "evacuated eu-west-1 first" in row.reason, row
        away = await traffic_moves(env.client, req.service)
        assert [(m.direction, m.status) for m in away] == [("evacuate", "evacuated")]  # type: ignore[union-attr]
        assert away[0].weights_after["eu-west-1"] == 0  # type: ignore[union-attr]
        assert not [c for c in fleet.calls if c[0] == "rollback"]  # held: canary and baseline kept
        fleet.scenario.effects = []
        await h.execute_update(RolloutWorkflow.resolve_hold, ResolveHold(
            stage="eu-west-1/prod", action=decision, by="alice", reason="recovered" if decision == "retry" else "no"))
        result = await outcome(h)
        moves = await traffic_moves(env.client, req.service)
    assert [(m.direction, m.status) for m in moves] == [("evacuate", "evacuated"), ("restore", "restored")], moves  # type: ignore[union-attr]
    assert moves[1].weights_after == EVEN  # type: ignore[union-attr]
    stage = result.stage("eu-west-1/prod")
    assert stage is not None and "traffic restored" in stage.reason, stage.reason
    if decision == "retry":
        assert result.status == "succeeded" and stage.version_now == req.version
    else:
        assert result.status == "rolled_back" and stage.version_now == "1.0.0"


# -- rollouts and traffic know each other (issue #19 item 5, docs/traffic.md) -------------------------------------
async def _poll(pred: Any, timeout: float = 120.0, every: float = 0.3) -> Any:
    """Poll `pred()` (async) until it returns something truthy; fail after `timeout` seconds. A query that the
    server let time out (a loaded machine) is asked again."""
    async with asyncio.timeout(timeout):
        while True:
            try:
                got = await pred()
            except RPCError:
                got = None
            if got:
                return got
            await asyncio.sleep(every)


@dataclass
class HeldRollout:
    """What a rollout submitted while eu-west-1 was drained showed while it held, and how it ended."""

    rollout_id: str
    held: RolloutState
    details: str
    searchable: bool
    deployed_while_held: list[Any]
    result: RolloutState


async def held_rollout(client: Client, task_queue: str, tmp: Path) -> HeldRollout:
    """Submit a rollout while eu-west-1's users are moved away; once it holds, bring the region back."""
    registry, fleet = simulated_registry(weights={"eu-west-1": 0})
    req = make_request(traffic_recheck_seconds=1)
    router = registry.traffic_target("eu-west-1", "prod").router_for(req.service)  # type: ignore[union-attr]
    async with running_worker(client, registry, task_queue, tmp):
        handle = await start(client, req, task_queue)

        async def holding() -> RolloutState | None:
            state = await handle.query(RolloutWorkflow.status)
            return state if state.status == "waiting_traffic" else None

        async def searchable() -> bool:  # the list's columns say it too (published through the controls)
            attrs = (await handle.describe()).typed_search_attributes
            return attrs.get(search.STATUS) == "waiting_traffic" and attrs.get(search.STAGE) == "eu-west-1/prod"

        held = await _poll(holding)
        found = await _poll(searchable)
        meta = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)  # the UI's details
        deployed = [c for c in fleet.calls if c[1] == "eu-west-1/prod" and c[0].startswith("deploy")]
        await router.set_weights({"us-east-1": 100, "eu-west-1": 100, "ap-south-1": 100},
                                 expect={"us-east-1": 100, "eu-west-1": 0, "ap-south-1": 100})  # the region is back
        async with asyncio.timeout(180):
            result = await outcome(handle)
    return HeldRollout(handle.id, held, meta.current_details, found, deployed, result)


async def test_a_wave_whose_region_is_evacuated_holds_until_its_traffic_is_back(env, task_queue, tmp_path):
    run = await held_rollout(env.client, task_queue, tmp_path)
    hold = next(h for h in run.held.holds if h.reason == "traffic")
    assert hold.targets == ["eu-west-1/prod"] and "eu-west-1: evacuated (weight 0 of 200)" in (run.held.waiting_for or "")
    # no canary was started there while it held: the stage had not begun, nothing was deployed in eu-west-1/prod
    assert {s.key: s.status for s in run.held.stages}["eu-west-1/prod"] == "pending" and not run.deployed_while_held
    assert run.searchable and "WAITING TRAFFIC" in run.details and "weight 0 of 200" in run.details
    assert run.result.status == "succeeded", run.result.reason
    assert [a.action for a in run.result.audit if a.action.startswith("traffic-")] == ["traffic-hold", "traffic-back"]


@dataclass
class Rejudged:
    rollout_id: str
    evacuation_id: str
    result: RolloutState
    stage_audit: list[dict[str, Any]]


async def rejudged_rollout(client: Client, task_queue: str, tmp: Path, machinery: bool = False) -> Rejudged:
    """One production stage, eu-west-1, judged on a 12 s window while ap-south-1's users are moved onto it (by a
    traffic change in the namespace people open, or with `machinery` in the machinery one, where a stage's own runs)."""
    registry, _ = simulated_registry()
    req = make_request(regions=[{"name": "eu-west-1", "environments": ["prod"], "traffic_share": 1.0}],
                       canary={"analysis_minutes": 0.2, "judge": {"min_samples": 5}}, blast_radius={"canary_region": None})
    async with running_worker(client, registry, task_queue, tmp):
        handle = await start(client, req, task_queue)
        stage = machinery_client(client).get_workflow_handle(f"{handle.id}/eu-west-1/prod")

        async def analyzing() -> bool:
            return bool((await stage.query("progress"))["state"]["status"] == "analyzing")

        await _poll(analyzing)
        mover = machinery_client(client) if machinery else client
        move = await mover.start_workflow(EvacuationWorkflow.run, evacuation(req.service, "ap-south-1", steps=[0]),
                                          id=evacuation_id(req.service), task_queue=task_queue)
        async with asyncio.timeout(180):
            moved = await move.result()
            assert moved.status == "evacuated" and "eu-west-1" in moved.receivers
            result = await outcome(handle)
        detail = await stage.query("progress")
    return Rejudged(handle.id, move.id, result, detail["audit"])


@pytest.mark.parametrize("machinery", [False, True], ids=["home-namespace", "machinery-namespace"])
async def test_a_canary_window_that_a_traffic_change_overlapped_is_judged_again_on_a_fresh_one(env, task_queue, tmp_path,
                                                                                               machinery):
    run = await rejudged_rollout(env.client, task_queue, tmp_path, machinery)
    assert run.result.status == "succeeded", run.result.reason
    discarded = [a for a in run.stage_audit if a["action"] == "window-discarded"]
    assert discarded and "overlapped a traffic change" in discarded[0]["detail"], run.stage_audit
    assert not [a for a in run.stage_audit if a["action"] == "window-judged"]  # the fresh window was clean
