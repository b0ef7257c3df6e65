"""A few random sequences of evacuate / restore / abort / pause through the CLI and the real workflow on the dev server.

The breadth is in tests/workflows/test_traffic_sequences.py (the plan alone, hundreds of sequences); these check
that the workflow applies the plan the same way: weights never all zero at any step, a region evacuated on its
own is never handed traffic by another region's change, and restoring every region gives the home weights back.
"""

from __future__ import annotations

import asyncio
import random
from fractions import Fraction

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle

from bifrost_cli import traffic
from tests.workflows.evacuation_helpers import running_worker, service, simulated_registry, wait_for
from workflows.evacuation.models import AbortShift
from workflows.evacuation.settings import EvacuationInput, evacuation_id
from workflows.evacuation.workflow import EvacuationWorkflow
from workflows.rollout.updates import Pause, Resume

REGIONS = ("us-east-1", "eu-west-1", "ap-south-1")
HOME = {r: 100 for r in REGIONS}
QUICK = {"health_baseline_minutes": 1, "health_interval_seconds": 1, "judge": {"min_samples": 1}}


def below_home(weights: dict[str, int]) -> set[str]:
    total = sum(weights.values())
    return {r for r, w in weights.items() if Fraction(w, total) < Fraction(HOME[r], sum(HOME.values())) - Fraction(1, total)}


async def closed(handle: WorkflowHandle, timeout: float = 60.0) -> None:
    """Wait until the run has closed, not only reported itself finished: the CLI refuses the next change of the
    service while the previous run is still open (a loaded machine widens that gap to seconds)."""
    async with asyncio.timeout(timeout):
        while (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
            await asyncio.sleep(0.1)


@pytest.mark.parametrize("seed", [7, 1234])
async def test_random_sequences_through_the_workflow(env, task_queue, tmp_path, monkeypatch, capsys, seed: int):
    monkeypatch.setenv("TEMPORAL_ADDRESS", env.client.service_client.config.target_host)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", env.client.namespace)
    rng = random.Random(seed)
    registry, _ = simulated_registry(ttl=1)
    svc = service()
    handle = env.client.get_workflow_handle(evacuation_id(svc))
    weights, log = dict(HOME), []

    async def run(region: str, direction: str, how: str) -> None:
        nonlocal weights
        away = below_home(weights) - {region}
        before = dict(weights)
        if direction == "evacuate":
            inp = EvacuationInput(service=svc, region=region, requested_by="alice", **QUICK)
            code = await traffic.run_evacuate(inp, wait=how == "plain", task_queue=task_queue)
        else:
            try:
                code = await traffic.run_restore(svc, region, "prod", who="bob", reason="", wait=how == "plain",
                                                 task_queue=task_queue)
            except SystemExit as refused:  # nothing to restore: refused before anything changed
                code = refused.code
        if how == "pause" and code == 0:
            try:
                await handle.execute_update(EvacuationWorkflow.pause, Pause(by="carol", reason="look"))
                await wait_for(handle, lambda s: s.status == "paused" or s.finished)
                await handle.execute_update(EvacuationWorkflow.resume, Resume(by="carol"))
            except Exception:  # noqa: BLE001 - it may have ended before the pause: refused, nothing to do
                pass
        if how == "abort" and code == 0:
            try:
                await handle.execute_update(EvacuationWorkflow.abort, AbortShift(by="carol", reason="stop",
                                                                                 revert=rng.random() < 0.5))
            except Exception:  # noqa: BLE001 - ended already
                pass
        state = await wait_for(handle, lambda s: s.finished, timeout=120)
        await closed(handle)
        log.append(f"{how} {direction} {region}: {state.status} {state.weights_before} -> {state.weights_after} ({code})")
        for step in state.steps:
            assert sum(step.weights.values()) > 0, log
        if state.weights_after:
            weights = dict(state.weights_after)
        for r in away:  # evacuated on its own: untouched by a restore, never handed traffic by an evacuation
            if direction == "restore":
                assert weights[r] == before[r], log
            else:
                assert Fraction(weights[r], sum(weights.values())) <= Fraction(before[r], sum(before.values())) + \
                    Fraction(1, sum(weights.values())), log

    async with running_worker(env.client, registry, task_queue, tmp_path):
        for how in ("plain", "pause", "abort", "plain", "abort", "pause"):  # random regions and directions
            region = rng.choice(REGIONS)
            direction = "restore" if region in below_home(weights) and rng.random() < 0.6 else "evacuate"
            await run(region, direction, how)
        for region in sorted(below_home(weights)):
            await run(region, "restore", "plain")
            assert region not in below_home(weights), log
    capsys.readouterr()
    assert weights == HOME, log
