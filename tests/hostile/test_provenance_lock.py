"""Runs someone else started (issue #29): a service lock, a report started by hand, as the Web UI's "Start
Workflow" would, must not refuse, cancel or block real releases, deploy anything, or write a report.

Every test here reproduces an attack that did harm before the checks of workflows/parentage.py and
activities/lock.py: a forged lock refused a release with the attacker's words, aborted one as "superseded by 9.9.9"
and kept the third queued for ever; a lock on a task queue nobody polls kept a rollout waiting for ever; a stage
started by hand deployed its version; a report started by hand stored a page."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.workflow import Info, ParentInfo

from bifrost_cli.ops import outcome, start_rollout
from common.lock import LockRequest, LockState, lock_id
from common.types import MetricWindow, StageRef
from tests.workflows.helpers import failed_at_once, fleet, make_request, running_worker
from worker.endpoints import machinery_client
from workflows.lock.workflow import ServiceLockWorkflow
from workflows.parentage import lock_refusal, report_refusal, stage_refusal
from workflows.provenance import require_continued
from workflows.report.workflow import report_workflow_id
from workflows.rollout.models import RolloutState
from workflows.rollout.updates import Approve
from workflows.rollout.workflow import RolloutWorkflow

ONE_REGION = {"regions": [{"name": "us-east-1", "traffic_share": 1.0}], "blast_radius": {"canary_region": None}}
FORGED = "security freeze until the audit closes, ticket INC-7"


async def refused_at_once(handle: WorkflowHandle, field: str) -> str:
    """The run failed on its first task with one InvalidPayload line naming `field`, and no stack trace."""
    cause = await failed_at_once(handle, "InvalidPayload")  # before: a forged lock waited idle 5 min, a stage deployed
    assert f": {field}: " in cause.message and "\n" not in cause.message, cause.message
    return cause.message


async def forged_lock_ended(client: Client, lock: WorkflowHandle) -> str:
    """How a forged lock run ended, in one line: it failed on its first task (InvalidPayload naming its holder), or —
    when a rollout's claim came first — the claim terminated it as not a Bifrost lock. Either way it ran nothing."""
    lock = client.get_workflow_handle(lock.id, run_id=lock.result_run_id)  # the forged run, not a later true one
    async with asyncio.timeout(30):
        while (desc := await lock.describe()).status == WorkflowExecutionStatus.RUNNING:
            await asyncio.sleep(0.2)
    if desc.status == WorkflowExecutionStatus.TERMINATED:
        ended = [e async for e in lock.fetch_history_events()][-1]
        reason: str = ended.workflow_execution_terminated_event_attributes.reason
        assert reason.startswith("not a Bifrost lock"), reason
        return reason
    return await refused_at_once(lock, "holder")


async def until_done(h: WorkflowHandle, deadline: float) -> RolloutState:
    async with asyncio.timeout(deadline):  # before: the third rollout stayed queued behind the forged holder for ever
        return await outcome(h)


# -- the service lock --------------------------------------------------------------------------------------------

async def test_a_forged_lock_refuses_aborts_or_blocks_no_real_release(env, task_queue, tmp_path):
    svc = make_request().service
    reqs = [make_request(service=svc, version=v, **ONE_REGION) for v in ("1.0.1", "1.0.2", "1.0.3")]
    fake_holder = f"rollout/{svc}/9.9.9"
    forged = LockState(service=svc, holder=LockRequest(workflow_id=fake_holder, service=svc, version="9.9.9"),
                       refused={reqs[1].workflow_id: FORGED}, superseded={reqs[0].workflow_id: "9.9.9"},
                       log=[f"granted {fake_holder}"], holder_check_seconds=86_400)
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        # the forged holder "runs" (a workflow nobody polls), so the lock's holder check would never free it
        await env.client.start_workflow("Anything", id=fake_holder, task_queue=f"nobody-{uuid.uuid4().hex[:6]}")
        lock = await machinery_client(env.client).start_workflow("ServiceLockWorkflow", forged, id=lock_id(svc), task_queue=task_queue)
        handles = [await start_rollout(env.client, r, task_queue) for r in reqs]
        # the attacker pokes the rollouts, which confirm against the lock's state
        for h in handles:
            await h.signal("lock_refused", FORGED)
            await h.signal("superseded", "9.9.9")
        results = [await until_done(h, 120) for h in handles]
        await env.client.get_workflow_handle(fake_holder).terminate("test over")
    message = await forged_lock_ended(machinery_client(env.client), lock)
    assert "holder, queue" not in message and "holder, log, refused, superseded" in message, message
    assert [r.status for r in results] == ["succeeded"] * 3, [(r.status, r.reason) for r in results]
    assert not any("9.9.9" in (r.reason or "") or "INC-7" in (r.reason or "") for r in results)


@pytest.mark.parametrize("field", ["holder", "queue", "refused", "superseded", "log"])
async def test_a_lock_started_with_state_only_it_writes_fails_at_once(env, task_queue, tmp_path, field):
    svc = make_request().service
    request = LockRequest(workflow_id=f"rollout/{svc}/9.9.9", service=svc, version="9.9.9")
    given: dict[str, Any] = {"holder": request, "queue": [request], "refused": {request.workflow_id: FORGED},
                             "superseded": {request.workflow_id: "9.9.9"}, "log": ["granted nobody"]}
    raw = await Client.connect(env.client.service_client.config.target_host,  # as the UI, where the lock runs
                               namespace=machinery_client(env.client).namespace)
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        h = await raw.start_workflow("ServiceLockWorkflow", LockState(service=svc, **{field: given[field]}).model_dump(),
                                     id=lock_id(svc), task_queue=task_queue)
        await refused_at_once(h, field)
        state = await h.query("lock_state")  # a query on the failed run shows an empty lock, never the forged state
    assert state["holder"] is None and state["queue"] == [] and state["refused"] == {} and state["log"] == []


async def test_a_lock_under_another_id_fails_at_once(env, task_queue, tmp_path):
    svc = make_request().service
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        h = await machinery_client(env.client).start_workflow("ServiceLockWorkflow", LockState(service=svc),
                                            id=f"service-lock/other-{uuid.uuid4().hex[:6]}", task_queue=task_queue)
        message = await refused_at_once(h, "service")
    assert lock_id(svc) in message


async def test_an_impostor_lock_on_a_queue_nobody_polls_is_replaced_and_the_rollout_runs(env, task_queue, tmp_path):
    req = make_request(**ONE_REGION)
    nobody = f"nobody-polls-{uuid.uuid4().hex[:6]}"
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        impostor = await machinery_client(env.client).start_workflow("ServiceLockWorkflow", LockState(service=req.service),
                                                   id=lock_id(req.service), task_queue=nobody)
        h = await start_rollout(env.client, req, task_queue)
        result = await until_done(h, 60)  # before: it signalled the impostor, which never answered, and waited for ever
        events = [e async for e in machinery_client(env.client).get_workflow_handle(
            impostor.id, run_id=impostor.result_run_id).fetch_history_events()]
    assert result.status == "succeeded", result.reason
    ended = events[-1]
    assert ended.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED
    reason = ended.workflow_execution_terminated_event_attributes.reason
    assert "not a Bifrost lock" in reason and nobody in reason and h.id in reason and "\n" not in reason, reason


# -- a lock terminated under its holder --------------------------------------------------------------------------

GATED = {**ONE_REGION, "approvals": {"gates": [{"stage": "us-east-1/test"}]}}


async def holds_at_gate(client: Client, req: Any, task_queue: str) -> WorkflowHandle:
    """Start `req` (gated) and wait until it holds its lock at the approval gate."""
    h = await start_rollout(client, req, task_queue)
    async with asyncio.timeout(30):
        while (await h.query(RolloutWorkflow.status)).status != "awaiting_approval":
            await asyncio.sleep(0.1)
    return h


async def lock_knows(client: Client, service: str, workflow_id: str) -> LockState:
    """The running lock's state once it names `workflow_id` as holder, in its queue or as granted (polled, 30 s)."""
    async with asyncio.timeout(30):
        while True:
            try:
                state = await machinery_client(client).get_workflow_handle(lock_id(service)).query(
                    ServiceLockWorkflow.lock_state, rpc_timeout=timedelta(seconds=2))
            except RPCError:
                state = None  # between the terminated run and the next, or an impostor nobody polls
            known = [r.workflow_id for r in ([state.holder] if state.holder else []) + state.queue] if state else []
            if state is not None and (workflow_id in known or f"granted {workflow_id}" in state.log):
                return state  # the log too: a rollout granted at once may already have finished and released
            await asyncio.sleep(0.2)


async def approve_and_finish(a: WorkflowHandle, others: list[WorkflowHandle]) -> list[RolloutState]:
    await a.execute_update(RolloutWorkflow.approve, Approve(stage="us-east-1/test", approver="alice"))
    return [await until_done(h, 90) for h in (a, *others)]


async def test_a_lock_terminated_under_its_holder_recovers_the_holder(env, task_queue, tmp_path):
    a = make_request(version="1.0.1", **GATED)
    b = make_request(service=a.service, version="1.0.2", **ONE_REGION)
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        ha = await holds_at_gate(env.client, a, task_queue)
        await machinery_client(env.client).get_workflow_handle(lock_id(a.service)).terminate("attacker")
        hb = await start_rollout(env.client, b, task_queue)
        state = await lock_knows(env.client, a.service, hb.id)
        # before: the fresh lock was empty and granted b at once, while a still held it at its gate
        assert state.holder is not None and state.holder.workflow_id == ha.id, state
        assert [q.workflow_id for q in state.queue] == [hb.id], state
        assert (await hb.query(RolloutWorkflow.status)).status != "running"
        results = await approve_and_finish(ha, [hb])  # a's release reaches the new run and is confirmed
        lock = await machinery_client(env.client).get_workflow_handle(lock_id(a.service)).query(ServiceLockWorkflow.lock_state)
    assert [r.status for r in results] == ["succeeded"] * 2, [(r.status, r.reason) for r in results]
    assert f"released by {ha.id}" in lock.log and any(ha.id in line and "recovered" in line for line in lock.log), lock.log


async def test_a_waiting_rollout_keeps_its_place_when_the_lock_is_terminated(env, task_queue, tmp_path):
    a = make_request(version="1.0.1", **GATED)
    b, c = (make_request(service=a.service, version=v, **ONE_REGION) for v in ("1.0.2", "1.0.3"))
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        ha = await holds_at_gate(env.client, a, task_queue)
        hb = await start_rollout(env.client, b, task_queue)
        await lock_knows(env.client, a.service, hb.id)
        await machinery_client(env.client).get_workflow_handle(lock_id(a.service)).terminate("attacker")
        hc = await start_rollout(env.client, c, task_queue)
        state = await lock_knows(env.client, a.service, hc.id)
        # before: the fresh lock granted c at once; b, waiting, had lost its place
        assert state.holder is not None and state.holder.workflow_id == ha.id, state
        assert [q.workflow_id for q in state.queue] == [hb.id, hc.id], state
        results = await approve_and_finish(ha, [hb, hc])
        lock = await machinery_client(env.client).get_workflow_handle(lock_id(a.service)).query(ServiceLockWorkflow.lock_state)
    assert [r.status for r in results] == ["succeeded"] * 3, [(r.status, r.reason) for r in results]
    granted = [line for line in lock.log if line.startswith("granted ")]
    assert granted[-2:] == [f"granted {hb.id}", f"granted {hc.id}"], lock.log


async def test_an_impostor_terminated_by_a_rollout_does_not_give_a_second_holder(env, task_queue, tmp_path):
    a = make_request(version="1.0.1", **GATED)
    b = make_request(service=a.service, version="1.0.2", **ONE_REGION)
    nobody = f"nobody-polls-{uuid.uuid4().hex[:6]}"
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        ha = await holds_at_gate(env.client, a, task_queue)
        await machinery_client(env.client).get_workflow_handle(lock_id(a.service)).terminate("attacker")
        await machinery_client(env.client).start_workflow("ServiceLockWorkflow", LockState(service=a.service), id=lock_id(a.service),
                                        task_queue=nobody)
        hb = await start_rollout(env.client, b, task_queue)  # its lock activity terminates the impostor, starts a true lock
        state = await lock_knows(env.client, a.service, hb.id)
        assert state.holder is not None and state.holder.workflow_id == ha.id, state  # before: b, at once
        assert [q.workflow_id for q in state.queue] == [hb.id], state
        results = await approve_and_finish(ha, [hb])
    assert [r.status for r in results] == ["succeeded"] * 2, [(r.status, r.reason) for r in results]


async def test_a_waiting_rollout_whose_lock_was_terminated_asks_again_and_runs(ts_env, task_queue, tmp_path):
    """Nobody submits after the lock is terminated: the holder's release finds no lock (not an error), and the waiting
    rollout's next re-check starts a fresh lock, which recovers its place and grants it (time skipping: minutes)."""
    a = make_request(version="1.0.1", **GATED)
    b = make_request(service=a.service, version="1.0.2", **ONE_REGION)
    async with running_worker(ts_env.client, fleet(), task_queue, tmp_path):
        with ts_env.with_time_skipping_disabled():  # a skipped clock would time out a's gate before it is approved
            ha = await holds_at_gate(ts_env.client, a, task_queue)
        hb = await start_rollout(ts_env.client, b, task_queue)
        await lock_knows(ts_env.client, a.service, hb.id)
        await machinery_client(ts_env.client).get_workflow_handle(lock_id(a.service)).terminate("attacker")
        results = await approve_and_finish(ha, [hb])  # before: b waited for ever on the terminated lock's state
        lock = await machinery_client(ts_env.client).get_workflow_handle(lock_id(a.service)).query(ServiceLockWorkflow.lock_state)
    assert [r.status for r in results] == ["succeeded"] * 2, [(r.status, r.reason) for r in results]
    assert f"recovered {hb.id} waiting (its own claim: waiting)" in lock.log and f"granted {hb.id}" in lock.log, lock.log


# -- a stage and a report started by hand -----------------------------------------------------------------------

async def test_a_report_started_by_hand_writes_nothing(env, task_queue, tmp_path):
    req = make_request(**ONE_REGION)
    stage_id = f"{req.workflow_id}/us-east-1/prod"
    now = datetime.now(UTC).replace(microsecond=0)
    report = {"stage": {"service": req.service, "region": "us-east-1", "environment": "prod"},
              "rollout_id": req.workflow_id, "analysis_id": "us-east-1-prod-canary",
              "metrics": [m.model_dump(mode="json") for m in req.canary.metrics],
              "judge": req.canary.judge.model_dump(mode="json"),
              "window": MetricWindow(start=now - timedelta(minutes=30), end=now, interval_seconds=60).model_dump(mode="json"),
              "baseline_version": "1.0.0", "canary_version": req.version}
    reports = tmp_path / "reports"
    async with running_worker(env.client, fleet(), task_queue, reports):
        h = await env.client.start_workflow("ReportWorkflow", report, id=report_workflow_id(stage_id, "us-east-1-prod-canary"),
                                            task_queue=task_queue)
        await refused_at_once(h, "rollout_id")
    assert not list(Path(reports).rglob("*.html"))  # before: the page was drawn and stored at the real report's key


# -- the rules themselves ----------------------------------------------------------------------------------------

def info(workflow_id: str, parent: str | None = None, continued: str | None = None, cron: str | None = None,
         attempt: int = 1) -> Info:
    """A run's server-set facts, as the workflow sees them."""
    return Info(
        attempt=attempt, continued_run_id=continued, cron_schedule=cron, execution_timeout=None,
        first_execution_run_id="r0", headers={}, namespace="default", original_execution_run_id="r0",
        parent=ParentInfo(namespace="default", run_id="p", workflow_id=parent) if parent else None, root=None,
        priority=None, raw_memo={}, retry_policy=None, run_id="r1", run_timeout=None,  # type: ignore[arg-type]
        search_attributes={}, start_time=datetime.now(UTC), task_queue="q", task_timeout=timedelta(seconds=10),
        typed_search_attributes=None, workflow_id=workflow_id,  # type: ignore[arg-type]
        workflow_start_time=datetime.now(UTC), workflow_type="X",
    )


def test_only_the_lock_s_own_continue_as_new_carries_its_state():
    held = LockState(service="pay", holder=LockRequest(workflow_id="rollout/pay/1", service="pay", version="1"))
    assert lock_refusal(held, info("service-lock/pay", continued="r0")) is None
    assert lock_refusal(LockState(service="pay"), info("service-lock/pay")) is None
    assert "holder" in (lock_refusal(held, info("service-lock/pay")) or "")
    assert "holder" in (lock_refusal(held, info("service-lock/pay", continued="r0", cron="* * * * *")) or "")  # cron
    assert "holder" in (lock_refusal(held, info("service-lock/pay", continued="r0", attempt=2)) or "")  # a retry
    assert "service" in (lock_refusal(LockState(service="pay"), info("service-lock/other")) or "")


def test_a_stage_and_a_report_run_only_under_the_parent_and_id_it_gives():
    args = ("rollout/pay/1.0.0/x1", "pay", "1.0.0", "us-east-1", "prod")
    mine = "rollout/pay/1.0.0/x1/us-east-1/prod"
    # a stage has no parent (its rollout starts it through Nexus; its history is checked in the run: origin.py)
    assert stage_refusal(*args, info(mine)) is None
    assert "not as the child of rollout/pay/1.0.0/x1" in (stage_refusal(*args, info(mine, parent=args[0])) or "")
    assert "not a rollout of pay 1.0.0" in (stage_refusal("evil/x", "pay", "1.0.0", "us-east-1", "prod",
                                                          info("evil/x/us-east-1/prod")) or "")
    assert "region" in (stage_refusal(*args, info("rollout/pay/1.0.0/x1/eu-west-1/prod")) or "")
    report = f"{mine}/report/a1"
    assert report_refusal(args[0], "a1", "us-east-1/prod", info(report, parent=mine)) is None
    assert report_refusal("traffic/pay", "a1", "eu-west-1/prod", info("traffic/pay/report/a1", parent="traffic/pay")) is None
    assert "by hand" in (report_refusal(args[0], "a1", "us-east-1/prod", info(report)) or "")
    assert "analysis_id" in (report_refusal(args[0], "a2", "us-east-1/prod", info(report, parent=mine)) or "")
    assert "own key" in (report_refusal("rollout/pay/2.0.0", "a1", "us-east-1/prod", info(report, parent=mine)) or "")
    assert StageRef(service="pay", region="us-east-1", environment="prod").key == "us-east-1/prod"


def test_a_guard_state_rides_only_on_the_guard_s_own_continue_as_new():
    """A cron schedule or a retry also sets `continued_run_id`, but starts the first input again: a state typed into
    a cron-started guard would otherwise be taken from its second run on."""
    carried = object()
    require_continued("guard", "state", carried, info("guard/pay", continued="r0"))
    require_continued("guard", "state", None, info("guard/pay"))
    for server_set in (info("guard/pay"), info("guard/pay", continued="r0", cron="* * * * *"),
                       info("guard/pay", continued="r0", attempt=2)):
        with pytest.raises(ApplicationError) as err:
            require_continued("guard", "state", carried, server_set)
        assert "state: only the workflow's own continue-as-new carries it" in err.value.message
