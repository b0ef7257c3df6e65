"""The region guard's part of `bifrost demo` (issue #19 item 8): a region degrades in the simulated fleet, the
guard evacuates it, the region heals, the guard restores it; the weights before, during and after are printed.

Time is compressed: the guard looks every second over a minute of the fleet's samples, and the evacuation
waits out the example targets' 5 s TTL per step, so the whole act takes about a minute."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from rich.console import Console
from rich.text import Text
from temporalio.client import Client, WorkflowHandle

from activities.adapters.simulated import SimulatedFleet, VersionEffect
from workflows.guard.models import GuardInput, GuardState, StopGuard, guard_id
from workflows.guard.workflow import RegionGuardWorkflow

SICK = "eu-west-1"
ACT_DEADLINE = 240.0  # seconds each phase may take before the demo gives up (and fails, saying where)


def demo_guard_input(service: str) -> GuardInput:
    """A guard in auto mode on compressed time: looks every second, two unhealthy looks to act, a half-share probe."""
    return GuardInput.model_validate({
        "service": service, "requested_by": "demo", "reason": "make demo: the region guard",
        "rules": {"mode": "auto", "min_gap_minutes": 0}, "judge": {"unhealthy_looks": 2, "healthy_looks": 2},
        "look_interval_seconds": 1, "window_seconds": 60, "sample_interval_seconds": 1,
        "evacuation": {"steps": [0], "health_interval_seconds": 1, "min_samples": 1}, "probe_percent": 50, "probe_looks": 2,
    })


@dataclass
class GuardAct:
    """What the demo's guard did: the weights before, during and after, and whether it went as it should."""

    before: dict[str, int] = field(default_factory=dict)
    during: dict[str, int] = field(default_factory=dict)
    after: dict[str, int] = field(default_factory=dict)
    problem: str = ""
    sick: str = SICK

    @property
    def ok(self) -> bool:
        return (not self.problem and self.during.get(SICK) == 0 and self.after == self.before
                and all(w > 0 for w in self.before.values()))


async def _until(handle: WorkflowHandle[RegionGuardWorkflow, GuardState], pred: Callable[[GuardState], bool]) -> GuardState:
    async with asyncio.timeout(ACT_DEADLINE):
        while True:
            state: GuardState = await handle.query(RegionGuardWorkflow.status)
            if pred(state):
                return state
            await asyncio.sleep(0.5)


async def guard_act(client: Client, fleet: SimulatedFleet, service: str, version: str, task_queue: str,
                    console: Console) -> GuardAct:
    """Start a guard on `service`, make `version` fail 3x as often in eu-west-1, heal it, and record the weights."""
    act = GuardAct()
    handle = await client.start_workflow(RegionGuardWorkflow.run, demo_guard_input(service), id=guard_id(service),
                                         task_queue=task_queue)
    sick = VersionEffect(version=version, regions=[SICK], environments=["prod"], error_factor=3.0)
    phase = "the first look"

    async def turn(change: Callable[[VersionEffect], None], says: str, decided: str) -> GuardState:
        """Make SICK degrade or heal (`change`), say so, and wait for the guard's `decided` decision."""
        nonlocal phase
        phase = f"{SICK} {decided}"
        change(sick)
        console.print(Text(says))
        return await _until(handle, lambda s: any(d.action == decided for d in s.decisions))

    try:
        state = await _until(handle, lambda s: s.look >= 1 and bool(s.weights))
        act.before = dict(state.weights)
        console.print(Text(f"region guard {guard_id(service)} watching; weights before: {act.before}"))
        state = await turn(fleet.scenario.effects.append, f"{SICK} degrades: {version} fails 3x as often there as in "
                           "its peers", "evacuated")
        act.during = dict(state.weights)
        why = next(d for d in state.decisions if d.action == "evacuate").reasons[0]
        console.print(Text(f"the guard evacuated {SICK} (look {state.look}): {why[:160]}"))
        console.print(Text(f"weights during: {act.during}"))
        state = await turn(fleet.scenario.effects.remove, f"{SICK} heals: the guard probes it at half its share, then "
                           "restores it", "restored")
        act.after = dict(state.weights)
        console.print(Text(f"weights after: {act.after}"))
    except TimeoutError:
        act.problem = f"the guard did not get to '{phase}' within {ACT_DEADLINE:g} s"
    finally:
        if sick in fleet.scenario.effects:
            fleet.scenario.effects.remove(sick)
        await handle.execute_update(RegionGuardWorkflow.stop, StopGuard(by="demo", reason="demo over"))
        async with asyncio.timeout(ACT_DEADLINE):
            await handle.result()
    return act
