"""Issue #29, traffic: ids are claims, not proof. Each attack a tester ran, on the dev server, shown harmless.

(a) an EvacuationWorkflow started by hand under another id (`traffic/decoy`) for a service: refused by its plan,
    nothing moved, and the real evacuation plans from the untouched weights;
(b) `bifrost evacuate B` while an evacuation of A runs: exit 3 at once (it used to wait for A's end, then drain B);
the guard and the drill under ids that are not theirs, and a guard started with a made-up `state`: refused at once;
the traffic gate's peer query of a run on a task queue nobody polls: answered at once as not Bifrost's.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleIntervalSpec,
    ScheduleSpec,
    WorkflowFailureError,
)
from temporalio.exceptions import ApplicationError

from activities.adapters.registry import AdapterRegistry
from activities.peers import PeerActivities, PeerQuery
from bifrost_cli import traffic
from common.failures import INVALID_REQUEST
from tests.workflows.evacuation_helpers import evacuation, running_worker, service, simulated_registry, wait_for
from tests.workflows.test_drill import ALL_WEEK, drill_input
from tests.workflows.test_guard import guard_input
from worker.endpoints import machinery_client
from workflows.drill.models import DrillReport, drill_id
from workflows.drill.workflow import DrillWorkflow
from workflows.evacuation.models import AbortShift, EvacuationState
from workflows.evacuation.settings import evacuation_id
from workflows.evacuation.workflow import EvacuationWorkflow
from workflows.guard.models import GuardState, RegionWatch, guard_id
from workflows.guard.workflow import RegionGuardWorkflow

pytestmark = pytest.mark.asyncio
DEADLINE = 60.0  # every wait is bounded: a refusal that does not come fails the test, never hangs it
EVEN = {"us-east-1": 100, "eu-west-1": 100, "ap-south-1": 100}


async def weights(registry: AdapterRegistry, svc: str) -> dict[str, int]:
    target = registry.traffic_target("eu-west-1", "prod")
    assert target is not None
    return await target.router_for(svc).weights()


async def refusal(client: Client, workflow: Any, inp: Any, workflow_id: str, task_queue: str) -> ApplicationError:
    """Start `workflow` under `workflow_id` and return the ApplicationError it fails with (within the deadline)."""
    async with asyncio.timeout(DEADLINE):
        with pytest.raises(WorkflowFailureError) as failed:
            await client.execute_workflow(workflow, inp, id=workflow_id, task_queue=task_queue)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError), cause
    assert cause.failure is not None and cause.failure.stack_trace == ""  # a quiet failure: no Python frames
    return cause


async def activities_run(client: Client, workflow_id: str) -> list[str]:
    return [e.activity_task_scheduled_event_attributes.activity_type.name
            async for e in client.get_workflow_handle(workflow_id).fetch_history_events()
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]


async def test_a_decoy_evacuation_under_another_id_is_refused_and_moves_nothing(env: Any, task_queue: str,
                                                                                 tmp_path: Path) -> None:
    registry, _ = simulated_registry(ttl=1)
    svc = service()
    decoy = f"traffic/decoy-{uuid.uuid4().hex[:6]}"
    async with running_worker(env.client, registry, task_queue, tmp_path):
        cause = await refusal(env.client, EvacuationWorkflow.run, evacuation(svc, steps=[50, 0]), decoy, task_queue)
        assert cause.type == INVALID_REQUEST
        assert f"service: a traffic change of {svc} runs only as workflow id {evacuation_id(svc)}, not {decoy}" in cause.message
        assert await weights(registry, svc) == EVEN  # nothing moved
        assert await activities_run(env.client, decoy) == ["plan_traffic"]  # refused by the plan: no scale, no step
        # the real one, under its claim, plans from the untouched weights
        real = await env.client.start_workflow(EvacuationWorkflow.run, evacuation(svc, steps=[0]), id=evacuation_id(svc),
                                               task_queue=task_queue)
        done = await wait_for(real, lambda s: s.finished, timeout=DEADLINE)
    assert done.status == "evacuated" and done.weights_before == EVEN and done.home_weights == EVEN


async def test_a_second_evacuate_while_one_runs_exits_3_at_once(env: Any, task_queue: str, tmp_path: Path,
                                                                 monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", env.client.service_client.config.target_host)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", env.client.namespace)
    registry, _ = simulated_registry(ttl=1)
    svc = service()
    first = evacuation(svc, "eu-west-1", steps=[0], require_approval=True)  # holds, running, until approved
    async with running_worker(env.client, registry, task_queue, tmp_path):
        assert await traffic.run_evacuate(first, wait=False, task_queue=task_queue) == 0
        capsys.readouterr()
        with pytest.raises(SystemExit) as busy:
            async with asyncio.timeout(20):  # before the fix it waited here for the first one's end
                await traffic.run_evacuate(evacuation(svc, "us-east-1", steps=[0]), wait=True, task_queue=task_queue)
        err = capsys.readouterr().err
        assert busy.value.code == 3, err
        assert f"another traffic change of {svc} is running: evacuate eu-west-1 by alice (awaiting_approval" in err
        assert f"bifrost traffic abort {svc}" in err and f"bifrost traffic status {svc}" in err
        handle = env.client.get_workflow_handle(evacuation_id(svc))
        await handle.execute_update(EvacuationWorkflow.abort, AbortShift(by="alice", reason="test over"))
        await wait_for(handle, lambda s: s.finished, timeout=DEADLINE)
        assert await weights(registry, svc) == EVEN  # us-east-1 kept its weight; eu-west-1 never moved either
        runs = [wf async for wf in env.client.list_workflows(f"WorkflowId = '{evacuation_id(svc)}'")]
        assert len(runs) == 1  # the second was never started


async def test_the_guard_runs_only_as_guard_of_its_service(env: Any, task_queue: str, tmp_path: Path) -> None:
    registry, _ = simulated_registry(ttl=1)
    svc = service()
    decoy = f"guard/decoy-{uuid.uuid4().hex[:6]}"
    async with running_worker(env.client, registry, task_queue, tmp_path):
        cause = await refusal(env.client, RegionGuardWorkflow.run, guard_input(svc), decoy, task_queue)
    assert cause.type == INVALID_REQUEST
    assert f"service: it runs only as workflow id {guard_id(svc)}, not {decoy}" in cause.message
    assert await activities_run(env.client, decoy) == []  # refused before its first look


async def test_a_guard_started_with_a_made_up_state_is_refused(env: Any, task_queue: str, tmp_path: Path) -> None:
    registry, _ = simulated_registry(ttl=1)
    svc = service()
    forged = GuardState(workflow_id=guard_id(svc), service=svc, regions={
        "eu-west-1": RegionWatch(region="eu-west-1", serving=False, evacuated_by_guard=True),
    })  # "the guard evacuated eu-west-1": it would restore a region it never evacuated
    async with running_worker(env.client, registry, task_queue, tmp_path):
        cause = await refusal(env.client, RegionGuardWorkflow.run, guard_input(svc, state=forged), guard_id(svc),
                              task_queue)
    assert cause.type == INVALID_REQUEST
    assert "state: only the workflow's own continue-as-new carries it; leave it out" in cause.message
    assert await activities_run(env.client, guard_id(svc)) == []
    assert await weights(registry, svc) == EVEN


async def test_the_drill_runs_only_under_its_services_names(env: Any, task_queue: str, tmp_path: Path) -> None:
    registry, _ = simulated_registry(ttl=1)
    svc, other = service(), service()
    async with running_worker(env.client, registry, task_queue, tmp_path):
        for wrong in (f"{drill_id(other)}/1", f"{drill_id(svc)}", f"{drill_id(svc)}-tomorrow"):
            cause = await refusal(env.client, DrillWorkflow.run, drill_input(svc), wrong, task_queue)
            assert cause.type == INVALID_REQUEST and f"not {wrong}" in cause.message, cause.message
            assert await activities_run(env.client, wrong) == []
        # the ids a schedule gives its runs pass: drill/<service>-<nominal time, RFC 3339 UTC>
        schedule = await env.client.create_schedule(drill_id(svc), Schedule(
            action=ScheduleActionStartWorkflow(DrillWorkflow.run, drill_input(svc, blocked_windows=[ALL_WEEK]),
                                               id=drill_id(svc), task_queue=task_queue),
            spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(days=7))])))
        try:
            await schedule.trigger()
            async with asyncio.timeout(DEADLINE):
                while not (runs := [wf async for wf in env.client.list_workflows(
                        f"WorkflowType = 'DrillWorkflow' AND TemporalScheduledById = '{drill_id(svc)}'")]):
                    await asyncio.sleep(0.2)
                report: DrillReport = await env.client.get_workflow_handle(runs[0].id, result_type=DrillReport).result()
        finally:
            await schedule.delete()
    assert runs[0].id.startswith(f"{drill_id(svc)}-") and runs[0].id.endswith("Z")
    assert report.outcome == "skipped"  # ran (inside its blocked window), not refused


async def test_the_gate_does_not_ask_a_run_on_a_task_queue_nobody_polls(env: Any, task_queue: str,
                                                                        tmp_path: Path) -> None:
    registry, _ = simulated_registry(ttl=1)
    svc, other = service(), service()
    peers = PeerActivities(env.client)
    # a hand-started evacuation no Bifrost worker will ever run: a query to it would wait for its RPC timeout
    await env.client.start_workflow(EvacuationWorkflow.run, evacuation(svc), id=evacuation_id(svc),
                                    task_queue=f"nobody-{uuid.uuid4().hex[:6]}")
    ask = PeerQuery(workflow_id=evacuation_id(svc), query="status", task_queue=task_queue,
                    workflow_type="EvacuationWorkflow")
    async with asyncio.timeout(10):
        answer = await peers.query_workflow(ask)
    assert answer.found and answer.answer is None and answer.error is not None
    assert "not Bifrost's" in answer.error
    # a run of Bifrost's, on its task queue, is still asked, and says whether it runs
    async with running_worker(env.client, registry, task_queue, tmp_path):
        handle = await env.client.start_workflow(EvacuationWorkflow.run, evacuation(other, require_approval=True),
                                                 id=evacuation_id(other), task_queue=task_queue)
        await wait_for(handle, lambda s: s.status == "awaiting_approval", timeout=DEADLINE)
        async with asyncio.timeout(DEADLINE):
            mine = await peers.query_workflow(ask.model_copy(update={"workflow_id": evacuation_id(other)}))
        assert mine.error is None and mine.running is True
        assert EvacuationState.model_validate(mine.answer).status == "awaiting_approval"
        await handle.terminate("test over")


async def test_a_traffic_change_in_the_machinery_namespace_waits_for_none_running_in_the_home_one(
        env: Any, task_queue: str, tmp_path: Path) -> None:
    """`traffic/<service>` is unique per namespace only, and a rollout's stages move traffic from the machinery
    namespace: a change there is refused by its plan while one of the same service runs in the namespace people open
    (and the other way round), so a stage's evacuation never moves a record set beside a hand-started one."""
    registry, _ = simulated_registry(ttl=1)
    svc = service()
    async with running_worker(env.client, registry, task_queue, tmp_path):
        held = await env.client.start_workflow(EvacuationWorkflow.run, evacuation(svc, require_approval=True),
                                               id=evacuation_id(svc), task_queue=task_queue)
        await wait_for(held, lambda s: s.status == "awaiting_approval", timeout=DEADLINE)
        cause = await refusal(machinery_client(env.client), EvacuationWorkflow.run, evacuation(svc, steps=[0]),
                              evacuation_id(svc), task_queue)
        assert f"another traffic change of {svc} runs ({evacuation_id(svc)} in namespace {env.client.namespace}" \
            in cause.message, cause.message  # before: it drained eu-west-1 beside the held change
        assert await weights(registry, svc) == EVEN  # nothing moved
        await held.terminate("test over")
