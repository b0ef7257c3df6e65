"""`make demo`'s region-guard act (issue #19 item 8) on the dev server over the demo's own fleet and targets:
eu-west-1 degrades, the guard evacuates it, it heals, the guard restores it, and the weights are printed."""

from __future__ import annotations

import io
import uuid
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from activities.adapters.registry import registry_from_targets
from activities.adapters.simulated import FleetScenario, SimulatedFleet
from activities.adapters.targets import load_targets
from bifrost_cli.demo import EXAMPLES
from bifrost_cli.demo_guard import guard_act
from tests.workflows.evacuation_helpers import running_worker, service

pytestmark = pytest.mark.asyncio


async def test_the_demo_guard_evacuates_a_degraded_region_and_restores_it_when_it_heals(env: Any, tmp_path: Path) -> None:
    # the demo's fleet, with a primary's samples drawn once per stage and version: the same verdicts every run
    fleet = SimulatedFleet(FleetScenario.load(EXAMPLES / "demo-fleet.yaml").model_copy(update={"fresh_draws": False}))
    registry = registry_from_targets(load_targets(EXAMPLES / "simulated-traffic.yaml"), fleet=fleet)
    out, tq, svc = io.StringIO(), f"tq-{uuid.uuid4().hex[:8]}", service()
    async with running_worker(env.client, registry, tq, tmp_path):
        act = await guard_act(env.client, fleet, svc, "1.9.0", tq, Console(file=out, width=200))
    printed = out.getvalue()
    assert act.ok, (act, printed)
    assert act.before == act.after == {"us-east-1": 100, "eu-west-1": 100, "ap-south-1": 100}
    assert act.during == {"us-east-1": 150, "eu-west-1": 0, "ap-south-1": 150}
    assert f"weights before: {act.before}" in printed and f"weights during: {act.during}" in printed
    assert f"weights after: {act.after}" in printed and "the guard evacuated eu-west-1" in printed
    assert not fleet.scenario.effects or all(e.version != "1.9.0" for e in fleet.scenario.effects)  # healed
