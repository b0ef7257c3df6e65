"""RegionGuardWorkflow on the dev server over the simulated fleet (issue #19 item 2): a degraded region is evacuated
in auto mode (and restored once it heals), propose mode waits for approval, and the last region is never evacuated."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError

from activities.adapters.registry import registry_from_targets
from activities.adapters.simulated import FleetScenario, SimulatedFleet, VersionEffect
from activities.adapters.targets import parse_targets
from common.types import StageRef
from tests.workflows.evacuation_helpers import running_worker, service, simulated_targets
from workflows.evacuation.models import EvacuationState
from workflows.evacuation.settings import evacuation_id
from workflows.guard.models import ApproveGuard, GuardInput, GuardState, StopGuard
from workflows.guard.workflow import RegionGuardWorkflow

pytestmark = pytest.mark.asyncio


def fleet_with(sick: dict[str, float], samples: int = 120, **targets: Any) -> tuple[Any, SimulatedFleet]:
    """A simulated fleet whose primaries (1.0.0) fail `factor` times as often in the given regions."""
    effects = [VersionEffect(version="1.0.0", regions=[r], error_factor=f) for r, f in sick.items()]
    fleet = SimulatedFleet(FleetScenario(fresh_draws=False, min_samples=samples, effects=effects))
    return registry_from_targets(parse_targets(simulated_targets(**targets)), fleet), fleet


def guard_input(svc: str, **overrides: Any) -> GuardInput:
    data: dict[str, Any] = {
        "service": svc, "requested_by": "alice", "reason": "test", "look_interval_seconds": 1, "window_seconds": 60,
        "sample_interval_seconds": 1, "steps": [0], "evacuation_health_interval_seconds": 1,
        "evacuation_min_samples": 1, "judge": {"unhealthy_looks": 2, "healthy_looks": 2},
        "rules": {"mode": "auto", "min_gap_minutes": 0},
    }
    data.update(overrides)
    return GuardInput.model_validate(data)


async def start(client: Client, inp: GuardInput, task_queue: str) -> WorkflowHandle:
    await client.start_workflow(RegionGuardWorkflow.run, inp, id=f"guard/{inp.service}", task_queue=task_queue)
    return client.get_workflow_handle(f"guard/{inp.service}", result_type=GuardState)  # the latest run: the guard continues as new


async def wait_for(handle: WorkflowHandle, pred: Callable[[GuardState], bool], timeout: float = 90.0) -> GuardState:
    async with asyncio.timeout(timeout):
        while True:
            state = await handle.query(RegionGuardWorkflow.status)
            if pred(state):
                return state
            await asyncio.sleep(0.2)


UPDATE_DEADLINE = 60.0  # every wait of these tests is bounded: a lost update fails the test, never hangs the suite


async def update(handle: WorkflowHandle, fn: Any, arg: Any) -> Any:
    """Send an update and wait for its answer, for at most UPDATE_DEADLINE seconds."""
    async with asyncio.timeout(UPDATE_DEADLINE):
        return await handle.execute_update(fn, arg)


async def stop(handle: WorkflowHandle) -> GuardState:
    """Stop the guard and wait for its final state (bounded: the CI hang was a stop the next run forgot)."""
    await update(handle, RegionGuardWorkflow.stop, StopGuard(by="alice", reason="test over"))
    async with asyncio.timeout(UPDATE_DEADLINE):
        return await handle.result()


async def test_auto_evacuates_a_degraded_region_then_restores_it_when_it_heals(env: Any, tmp_path: Path) -> None:
    svc, tq = service(), f"tq-{uuid.uuid4().hex[:8]}"
    registry, fleet = fleet_with({"eu-west-1": 3.0})
    async with running_worker(env.client, registry, tq, tmp_path):
        handle = await start(env.client, guard_input(svc), tq)
        state = await wait_for(handle, lambda s: any(d.action == "evacuated" for d in s.decisions))
        assert state.weights["eu-west-1"] == 0 and state.regions["eu-west-1"].evacuated_by_guard
        assert {"us-east-1", "ap-south-1"} == state.serving()
        decided = [d for d in state.decisions if d.action == "evacuate"]
        assert decided[0].region == "eu-west-1" and "error_rate" in decided[0].reasons[0]
        assert decided[0].look >= 2  # K = 2 unhealthy looks first
        assert state.last_auto_evacuation is not None
        evacuation = await env.client.get_workflow_handle(evacuation_id(svc), result_type=EvacuationState).result()
        assert evacuation.status == "evacuated" and evacuation.requested_by == "region-guard"
        # healthy peers are never touched
        assert not any(d.region != "eu-west-1" and d.action in ("evacuate", "propose") for d in state.decisions)
        fleet.scenario.effects.clear()  # the region heals
        state = await wait_for(handle, lambda s: s.regions["eu-west-1"].probing)
        # the probe: 10% of its home share (10 of 300), judged against its peers before the rest comes back
        assert state.weights == {"us-east-1": 145, "eu-west-1": 10, "ap-south-1": 145}
        assert "eu-west-1" not in state.serving()
        state = await wait_for(handle, lambda s: any(d.action == "restored" for d in s.decisions))
        actions = [d.action for d in state.decisions if d.region == "eu-west-1"]
        assert actions[-4:] == ["restore", "probe", "restore", "restored"]
        assert state.weights == {"us-east-1": 100, "eu-west-1": 100, "ap-south-1": 100}
        assert state.serving() == {"us-east-1", "eu-west-1", "ap-south-1"}
        final = await stop(handle)
        assert final.status == "stopped" and "traffic stays where it is" in final.reason


async def test_propose_waits_for_approval_then_evacuates(env: Any, tmp_path: Path) -> None:
    svc, tq = service(), f"tq-{uuid.uuid4().hex[:8]}"
    registry, fleet = fleet_with({"ap-south-1": 3.0})
    async with running_worker(env.client, registry, tq, tmp_path):
        # continue-as-new every 2 looks: the proposal, its hold and the streaks travel to the next run
        handle = await start(env.client, guard_input(svc, rules={"mode": "propose"}, approvers=["alice"], looks_per_run=2), tq)
        state = await wait_for(handle, lambda s: bool(s.proposals))
        assert state.proposals[0].region == "ap-south-1" and state.status == "awaiting_approval"
        assert "mode is propose" in state.proposals[0].reasons
        # nothing moves while it waits: the weights are as they were, several looks later
        state = await wait_for(handle, lambda s: s.look >= state.look + 3)
        assert state.weights["ap-south-1"] == 100 and state.proposals and state.runs >= 2
        assert state.status == "awaiting_approval" and state.regions["ap-south-1"].streak.unhealthy >= 4
        with pytest.raises(WorkflowUpdateFailedError) as err:
            await update(handle, RegionGuardWorkflow.approve, ApproveGuard(region="ap-south-1", approver="mallory"))
        assert "may not approve" in str(err.value.cause)
        with pytest.raises(WorkflowUpdateFailedError) as err:
            await update(handle, RegionGuardWorkflow.approve, ApproveGuard(region="us-east-1", approver="alice"))
        assert "no proposal for us-east-1" in str(err.value.cause)
        await update(handle, RegionGuardWorkflow.approve, ApproveGuard(region="ap-south-1", approver="alice"))
        state = await wait_for(handle, lambda s: any(d.action == "evacuated" for d in s.decisions))
        assert state.weights["ap-south-1"] == 0 and not state.proposals
        assert state.last_auto_evacuation is None  # approved by a person: not an automatic evacuation
        assert any(a.who == "alice" and a.action == "evacuate proposal" for a in state.audit)
        await stop(handle)


async def test_never_evacuates_the_last_serving_region(env: Any, tmp_path: Path) -> None:
    svc, tq = service(), f"tq-{uuid.uuid4().hex[:8]}"
    # two regions, one already drained by hand; the serving one is sick (an absolute SLO: no peer to compare with)
    registry, fleet = fleet_with({"us-east-1": 5.0}, regions=("us-east-1", "eu-west-1"), weights={"eu-west-1": 0})
    async with running_worker(env.client, registry, tq, tmp_path):
        handle = await start(env.client, guard_input(svc, judge={"unhealthy_looks": 2, "slo": {"error_rate": 0.005}}), tq)
        state = await wait_for(handle, lambda s: any(d.action == "refuse" for d in s.decisions))
        refusal = next(d for d in state.decisions if d.action == "refuse")
        assert refusal.region == "us-east-1" and any("last serving region" in r for r in refusal.reasons)
        state = await wait_for(handle, lambda s: s.look >= refusal.look + 2)
        assert state.weights == {"us-east-1": 100, "eu-west-1": 0}
        assert [d.action for d in state.decisions if d.region == "us-east-1"] == ["refuse"]  # said once, not every look
        stage = StageRef(service=svc, region="us-east-1", environment="prod")
        assert fleet.slot(stage).replicas is None  # nothing scaled either
        await stop(handle)


async def test_bad_input_is_refused_by_the_workflow_naming_the_field(env: Any, tmp_path: Path) -> None:
    svc, tq = service(), f"tq-{uuid.uuid4().hex[:8]}"
    registry, _ = fleet_with({})
    async with running_worker(env.client, registry, tq, tmp_path):
        handle = await start(env.client, guard_input(svc, steps=[10, 50], window_seconds=5), tq)
        with pytest.raises(Exception) as info:
            await handle.result()
        text = str(info.value.cause)  # type: ignore[attr-defined]
        assert "steps:" in text and "window_seconds:" in text


async def test_a_probe_unhealthy_against_its_peers_is_drained_again(env: Any, tmp_path: Path) -> None:
    svc, tq = service(), f"tq-{uuid.uuid4().hex[:8]}"
    # samples follow traffic: the probe is given half the region's share so that it has enough to be judged on
    registry, fleet = fleet_with({"eu-west-1": 3.0})
    sick = list(fleet.scenario.effects)
    async with running_worker(env.client, registry, tq, tmp_path):
        handle = await start(env.client, guard_input(svc, probe_looks=4, probe_percent=50), tq)
        await wait_for(handle, lambda s: any(d.action == "evacuated" for d in s.decisions))
        fleet.scenario.effects.clear()
        await wait_for(handle, lambda s: s.regions["eu-west-1"].probing)
        fleet.scenario.effects.extend(sick)  # it falls sick again at its probe share
        state = await wait_for(handle, lambda s: [d.action for d in s.decisions].count("evacuated") == 2)
        assert any(d.action == "evacuate" and "probe is unhealthy against its peers" in d.reasons[0]
                   for d in state.decisions), [(d.action, d.reasons) for d in state.decisions]
        assert state.weights["eu-west-1"] == 0 and not state.regions["eu-west-1"].probing
        assert not any(d.action == "restored" for d in state.decisions)
        # its restore still returns to the weights before the first evacuation
        watch = state.regions["eu-west-1"]
        assert watch.restore is not None and watch.restore.restore_to is not None
        assert watch.restore.restore_to.weights == {"us-east-1": 100, "eu-west-1": 100, "ap-south-1": 100}
        await stop(handle)


async def test_three_cycles_in_a_row_leave_every_region_at_its_replicas_and_none_is_refused(env: Any, tmp_path: Path) -> None:
    """guard_e2e's ratchet: each restore after a probe left eu-west-1 with more replicas (4, 10, then 24 refused by
    max_replicas 20). Now every cycle ends with every region at the replicas it started with."""
    svc, tq = service(), f"tq-{uuid.uuid4().hex[:8]}"
    registry, fleet = fleet_with({"eu-west-1": 3.0}, max_replicas=20)
    sick = list(fleet.scenario.effects)
    stages = {r: StageRef(service=svc, region=r, environment="prod") for r in ("us-east-1", "eu-west-1", "ap-south-1")}

    async def replicas() -> dict[str, int]:
        return {r: await registry.deployer(s).replicas(s) for r, s in stages.items()}

    start_replicas = await replicas()
    async with running_worker(env.client, registry, tq, tmp_path):
        handle = await start(env.client, guard_input(svc, steps=[50, 10, 0], probe_percent=50), tq)
        for cycle in range(1, 4):
            if cycle > 1:
                fleet.scenario.effects.extend(sick)  # it falls sick again
            state = await wait_for(handle, lambda s, n=cycle: [d.action for d in s.decisions].count("evacuated") == n)
            during = await replicas()
            assert during["us-east-1"] > start_replicas["us-east-1"]  # the receivers were pre-warmed
            fleet.scenario.effects.clear()  # the region heals
            state = await wait_for(handle, lambda s, n=cycle: [d.action for d in s.decisions].count("restored") == n
                                   or any(d.action == "failed" for d in s.decisions), timeout=120)
            assert not any(d.action in ("refuse", "failed") for d in state.decisions), [
                (d.action, d.reasons) for d in state.decisions if d.action in ("refuse", "failed")]
            assert state.weights == {"us-east-1": 100, "eu-west-1": 100, "ap-south-1": 100}
            assert await replicas() == start_replicas, f"cycle {cycle}"
        await stop(handle)


def held_looks(fleet: SimulatedFleet) -> tuple[asyncio.Event, asyncio.Event]:
    """Hold every metrics fetch of the fleet until `gate` is set; `entered` is set once a look is held there."""
    gate, entered = asyncio.Event(), asyncio.Event()
    fetch = fleet.fetch

    async def held(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        await gate.wait()
        return await fetch(*args, **kwargs)

    fleet.fetch = held  # type: ignore[method-assign]
    return gate, entered


async def test_a_stop_accepted_during_the_look_before_a_continue_as_new_still_stops(env: Any, tmp_path: Path) -> None:
    """The CI hang: `stop` was acknowledged while a look ran, the run then continued as new, and the new run,
    which never heard of the stop, watched on for ever (the test's `result()` with it)."""
    svc, tq = service(), f"tq-{uuid.uuid4().hex[:8]}"
    registry, fleet = fleet_with({})
    gate, entered = held_looks(fleet)
    async with running_worker(env.client, registry, tq, tmp_path):
        handle = await start(env.client, guard_input(svc, looks_per_run=1), tq)  # every look ends its run
        async with asyncio.timeout(60):
            await entered.wait()  # look 1 is under way; its run continues as new after it
        await update(handle, RegionGuardWorkflow.stop, StopGuard(by="alice", reason="maintenance"))
        gate.set()
        async with asyncio.timeout(60):
            final = await handle.result()
        assert final.status == "stopped" and final.reason.startswith("stopped by alice: maintenance")
        assert final.runs == 1 and final.look == 1  # it stopped instead of continuing as new
