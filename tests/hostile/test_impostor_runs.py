"""Runs under Bifrost's ids that Bifrost did not start (issue #29): anyone with namespace access may start any type
under any id on any task queue. A run no Bifrost worker will run (another task queue, or another workflow type)
must not wedge `bifrost submit`, `revert`, `evacuate` or `guard start`: the command terminates it, says so in one
line, and does its job. A genuine run (right type, right queue, even one no worker has polled yet) is attached to
or refused with exit 3 exactly as before."""

from __future__ import annotations

import asyncio
import io
import uuid
from typing import Any

import pytest
from rich.console import Console
from temporalio.client import Client, WorkflowExecutionStatus

from bifrost_cli import guard as guard_cli
from bifrost_cli import ops, traffic
from bifrost_cli import revert as revert_cli
from tests.workflows import evacuation_helpers as evac_helpers
from tests.workflows.helpers import fleet, make_request, running_worker
from tests.workflows.revert_helpers import FAST
from tests.workflows.test_guard import fleet_with
from tests.workflows.test_revert import _released
from workflows.evacuation.settings import EvacuationInput, evacuation_id
from workflows.evacuation.workflow import EvacuationWorkflow
from workflows.guard.models import guard_id
from workflows.guard.workflow import RegionGuardWorkflow

KINDS = ["unpolled queue", "another type"]
LIMIT = 90  # seconds: without the defence the commands wait for ever on the impostor


@pytest.fixture
def dev_server(env: Any, monkeypatch: Any) -> Client:
    monkeypatch.setenv("TEMPORAL_ADDRESS", env.client.service_client.config.target_host)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", env.client.namespace)
    client: Client = env.client
    return client


async def plant(client: Client, workflow_id: str, kind: str, workflow_type: str, arg: Any, task_queue: str) -> str:
    """Start an impostor by hand under `workflow_id`: Bifrost's type on a queue no worker polls (with Bifrost's own
    input, so its search attributes and memo could look right), or another type on Bifrost's queue."""
    if kind == "unpolled queue":
        handle = await client.start_workflow(workflow_type, arg, id=workflow_id, task_queue=f"nobody-{uuid.uuid4().hex}")
    else:
        handle = await client.start_workflow("NotBifrost", "forged", id=workflow_id, task_queue=task_queue)
    assert handle.result_run_id
    return handle.result_run_id


async def assert_terminated(client: Client, workflow_id: str, run_id: str, err: str, why: str, command: str) -> None:
    """The impostor ended Terminated, and one line on stderr named it, why and who."""
    described = await client.get_workflow_handle(workflow_id, run_id=run_id).describe()
    assert described.status == WorkflowExecutionStatus.TERMINATED
    lines = [line for line in err.splitlines() if f"terminated {workflow_id} (run {run_id})" in line]
    assert len(lines) == 1, err
    assert "not a Bifrost run" in lines[0] and why in lines[0] and f"terminated by {command}" in lines[0], lines[0]


def why_of(kind: str, workflow_type: str) -> str:
    return "runs on task queue 'nobody-" if kind == "unpolled queue" else f"runs workflow type 'NotBifrost', not '{workflow_type}'"


# -- bifrost submit ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
async def test_submit_ends_an_impostor_and_runs_the_rollout(dev_server: Client, task_queue: str, tmp_path: Any,
                                                            capsys: Any, kind: str) -> None:
    req = make_request(regions=[{"name": "us-east-1", "traffic_share": 1.0}], blast_radius={"canary_region": None})
    run_id = await plant(dev_server, req.workflow_id, kind, "RolloutWorkflow", req, task_queue)
    out = io.StringIO()
    async with running_worker(dev_server, fleet(), task_queue, tmp_path):
        async with asyncio.timeout(LIMIT):
            code = await ops.submit(req, wait=True, follow=False, task_queue=task_queue, console=Console(file=out, width=200))
    assert code == 0 and "succeeded" in out.getvalue(), out.getvalue()
    await assert_terminated(dev_server, req.workflow_id, run_id, capsys.readouterr().err,
                            why_of(kind, "RolloutWorkflow"), "bifrost submit (by ci)")


async def test_submit_still_attaches_to_a_genuine_run_no_worker_polled_yet(dev_server: Client, task_queue: str,
                                                                          capsys: Any) -> None:
    req = make_request()
    first = await ops.start_rollout(dev_server, req, task_queue)  # right type, right queue; no worker yet
    again = await ops.start_rollout(dev_server, req, task_queue)
    assert again.result_run_id == first.result_run_id
    assert (await first.describe()).status == WorkflowExecutionStatus.RUNNING
    assert "terminated" not in capsys.readouterr().err
    await first.terminate(reason="test over")


# -- bifrost revert ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
async def test_revert_ends_an_impostor_and_reverts(dev_server: Client, task_queue: str, tmp_path: Any, capsys: Any,
                                                   monkeypatch: Any, kind: str) -> None:
    monkeypatch.setattr(revert_cli, "STARTED_WITHIN", 30.0)  # without the defence it gives up on the impostor
    f = fleet()
    async with running_worker(dev_server, f, task_queue, tmp_path):
        req, _ = await _released(dev_server, f, task_queue, regions=[{"name": "us-east-1", "traffic_share": 1.0}],
                                 blast_radius={"canary_region": None})
        inp = revert_cli.revert_input({"service": req.service, "to_version": "1.0.0", "requested_by": "alice",
                                       "reason": "INC-9", **FAST})
        run_id = await plant(dev_server, inp.workflow_id, kind, "RevertWorkflow", inp, task_queue)
        capsys.readouterr()
        async with asyncio.timeout(LIMIT):
            code = await revert_cli.run_revert(inp, wait=True, task_queue=task_queue)
    captured = capsys.readouterr()
    assert code == 0 and "reverted" in captured.out, captured
    await assert_terminated(dev_server, inp.workflow_id, run_id, captured.err, why_of(kind, "RevertWorkflow"),
                            "bifrost revert (by alice)")


async def test_revert_still_attaches_to_a_genuine_run(dev_server: Client, task_queue: str, capsys: Any) -> None:
    inp = revert_cli.revert_input({"service": f"pay-{uuid.uuid4().hex[:8]}", "to_version": "1.0.0",
                                   "requested_by": "alice", "reason": "INC-9", **FAST})
    first = await revert_cli.start_revert(dev_server, inp, task_queue)
    again = await revert_cli.start_revert(dev_server, inp, task_queue)
    assert again.result_run_id == first.result_run_id
    assert (await first.describe()).status == WorkflowExecutionStatus.RUNNING
    assert "terminated" not in capsys.readouterr().err
    await first.terminate(reason="test over")


# -- bifrost evacuate -------------------------------------------------------------------------------
def evacuation(svc: str) -> EvacuationInput:
    return EvacuationInput(service=svc, region="eu-west-1", requested_by="alice", reason="INC-7",
                           health_baseline_minutes=1, health_interval_seconds=1, judge={"min_samples": 1})


@pytest.mark.parametrize("kind", KINDS)
async def test_evacuate_ends_an_impostor_and_evacuates(dev_server: Client, task_queue: str, tmp_path: Any,
                                                       capsys: Any, kind: str) -> None:
    registry, _ = evac_helpers.simulated_registry(ttl=1)
    inp = evacuation(evac_helpers.service())
    run_id = await plant(dev_server, evacuation_id(inp.service), kind, "EvacuationWorkflow", inp, task_queue)
    async with evac_helpers.running_worker(dev_server, registry, task_queue, tmp_path):
        async with asyncio.timeout(LIMIT):
            code = await traffic.run_evacuate(inp, wait=True, task_queue=task_queue)
    captured = capsys.readouterr()
    assert code == 0 and "evacuated" in captured.out, captured
    await assert_terminated(dev_server, evacuation_id(inp.service), run_id, captured.err,
                            why_of(kind, "EvacuationWorkflow"), "bifrost evacuate (by alice)")


async def test_evacuate_still_refuses_while_a_genuine_change_runs(dev_server: Client, task_queue: str, capsys: Any) -> None:
    inp = evacuation(evac_helpers.service())
    genuine = await dev_server.start_workflow(EvacuationWorkflow.run, inp, id=evacuation_id(inp.service),
                                              task_queue=task_queue)  # no worker has polled it yet
    with pytest.raises(SystemExit) as busy:
        await traffic.run_evacuate(inp.model_copy(update={"region": "us-east-1"}), wait=False, task_queue=task_queue)
    err = capsys.readouterr().err
    assert busy.value.code == 3 and "another traffic change of" in err and "terminated" not in err
    assert (await genuine.describe()).status == WorkflowExecutionStatus.RUNNING
    await genuine.terminate(reason="test over")


# -- bifrost guard start ----------------------------------------------------------------------------
def guard_input(svc: str) -> Any:
    return guard_cli.guard_input({
        "service": svc, "requested_by": "alice", "look_interval_seconds": 1, "window_seconds": 60,
        "sample_interval_seconds": 1, "steps": [0], "evacuation_health_interval_seconds": 1,
        "evacuation_min_samples": 1, "rules": {"mode": "propose"}})


@pytest.mark.parametrize("kind", KINDS)
async def test_guard_start_ends_an_impostor_and_starts_the_guard(dev_server: Client, task_queue: str, tmp_path: Any,
                                                                 capsys: Any, kind: str) -> None:
    registry, _ = fleet_with({"eu-west-1": 1.0})
    inp = guard_input(evac_helpers.service())
    run_id = await plant(dev_server, guard_id(inp.service), kind, "RegionGuardWorkflow", inp, task_queue)
    async with evac_helpers.running_worker(dev_server, registry, task_queue, tmp_path):
        assert await guard_cli.start_guard(inp, task_queue) == 0
        captured = capsys.readouterr()
        assert f"started {guard_id(inp.service)}: mode propose" in captured.out, captured
        await assert_terminated(dev_server, guard_id(inp.service), run_id, captured.err,
                                why_of(kind, "RegionGuardWorkflow"), "bifrost guard start (by alice)")
        guard = dev_server.get_workflow_handle(guard_id(inp.service))
        async with asyncio.timeout(LIMIT):  # a true guard: a worker answers its status query
            while True:
                try:
                    await guard.query(RegionGuardWorkflow.status)
                    break
                except Exception:  # noqa: BLE001 - not yet picked up by the worker
                    await asyncio.sleep(0.2)
        await guard.terminate(reason="test over")


async def test_guard_start_still_refuses_while_a_genuine_guard_runs(dev_server: Client, task_queue: str,
                                                                    capsys: Any) -> None:
    inp = guard_input(evac_helpers.service())
    genuine = await dev_server.start_workflow(RegionGuardWorkflow.run, inp, id=guard_id(inp.service),
                                              task_queue=task_queue)  # no worker has polled it yet
    with pytest.raises(SystemExit) as again:
        await guard_cli.start_guard(inp, task_queue)
    err = capsys.readouterr().err
    assert again.value.code == 3 and "already running" in err and "terminated" not in err
    assert (await genuine.describe()).status == WorkflowExecutionStatus.RUNNING
    await genuine.terminate(reason="test over")
