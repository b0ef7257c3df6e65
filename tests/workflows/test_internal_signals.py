"""Internal signals sent by hand, as the Web UI's "Send a Signal" would, with hostile payloads at the moments that
matter: none may move a rollout, a stage or the service lock; each leaves exactly one audit line."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError

from bifrost_cli.ops import outcome, start_rollout
from common.lock import LockState, lock_id
from tests.workflows.helpers import first_true_answer_unconfirmable, fleet, make_request, running_worker
from worker.endpoints import machinery_client
from workflows.lock.workflow import ServiceLockWorkflow
from workflows.rollout.models import RolloutState
from workflows.rollout.updates import Abort, Approve, SkipSoak
from workflows.rollout.workflow import RolloutWorkflow
from workflows.stage.models import AuditEntry, StageDetail
from workflows.stage.workflow import StageWorkflow

ONE_REGION = {"regions": [{"name": "us-east-1", "traffic_share": 1.0}], "blast_radius": {"canary_region": None}}
GATED = {"approvals": {"gates": [{"stage": "us-east-1/test"}], "approvers": ["alice"]}}


async def poll(read: Callable[[], Any], pred: Callable[[Any], bool], timeout: float = 30.0) -> Any:
    """Read until `pred` holds; fail after `timeout` seconds."""
    async with asyncio.timeout(timeout):
        while True:
            value = await read()
            if pred(value):
                return value
            await asyncio.sleep(0.1)


async def rollout_state(h: WorkflowHandle) -> RolloutState:
    return await h.query(RolloutWorkflow.status)


async def lock_state(client: Client, service: str) -> LockState:
    return await machinery_client(client).get_workflow_handle(lock_id(service)).query(ServiceLockWorkflow.lock_state)


def ignored(audit: list[AuditEntry], signal: str) -> list[AuditEntry]:
    return [a for a in audit if a.action == f"ignored {signal}"]


def frozen(state: RolloutState) -> dict[str, Any]:
    """Everything a hand-sent signal must not change: status, stages, pause, approvals, reason."""
    return state.model_dump(include={"status", "stages", "current_wave", "pause", "pending_approvals", "approved",
                                     "awaiting_wave", "reason"})


async def holder_and_queued(client: Client, task_queue: str) -> tuple[WorkflowHandle, WorkflowHandle, LockState]:
    """Rollout a holds its service's lock (waiting at an approval gate); rollout b waits in the lock's queue."""
    a = make_request(**ONE_REGION, **GATED)
    b = make_request(service=a.service, version="2.1.0", **ONE_REGION)
    ha = await start_rollout(client, a, task_queue)
    await poll(lambda: rollout_state(ha), lambda s: s.status == "awaiting_approval")
    hb = await start_rollout(client, b, task_queue)
    lock = await poll(lambda: lock_state(client, a.service), lambda s: [q.workflow_id for q in s.queue] == [hb.id])
    return ha, hb, lock


async def test_lock_signals_to_a_queued_rollout_change_nothing(env, task_queue, tmp_path):
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        ha, hb, _ = await holder_and_queued(env.client, task_queue)
        service = (await rollout_state(ha)).service
        before = await rollout_state(hb)
        assert before.status == "queued"
        await hb.signal("lock_granted", service)
        await hb.signal("lock_refused", "the change board said no")
        await hb.signal("superseded", "9.9.9")
        after = await poll(lambda: rollout_state(hb), lambda s: len(s.audit) >= len(before.audit) + 3
                           or frozen(s) != frozen(before))
        lock = await lock_state(env.client, service)
        assert frozen(after) == frozen(before)
        assert after.audit[:len(before.audit)] == before.audit and len(after.audit) == len(before.audit) + 3
        assert ignored(after.audit, "lock_granted")[0].detail == f"the lock's holder is {ha.id}"
        assert "has not refused this rollout" in ignored(after.audit, "lock_refused")[0].detail
        assert "has not superseded this rollout" in ignored(after.audit, "superseded")[0].detail
        assert lock.holder is not None and lock.holder.workflow_id == ha.id
        assert [q.workflow_id for q in lock.queue] == [hb.id]
        # the real protocol still works: a's approval lets it finish, then b gets the lock and runs
        await ha.execute_update(RolloutWorkflow.approve, Approve(stage="us-east-1/test", approver="alice"))
        ra, rb = await outcome(ha), await outcome(hb)
    assert (ra.status, rb.status) == ("succeeded", "succeeded")
    assert [e.action for e in rb.audit].count("lock-granted") == 1


async def test_lock_signals_to_a_running_rollout_change_nothing(env, task_queue, tmp_path):
    a = make_request(**ONE_REGION, **GATED)
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        h = await start_rollout(env.client, a, task_queue)
        before = await poll(lambda: rollout_state(h), lambda s: s.status == "awaiting_approval")
        await h.signal("superseded", "9.9.9")
        await h.signal("lock_refused", "invented reason")
        await h.signal("lock_granted", a.service)
        after = await poll(lambda: rollout_state(h), lambda s: len(s.audit) >= len(before.audit) + 3
                           or frozen(s) != frozen(before))
        assert frozen(after) == frozen(before)
        new = {e.action: e.detail for e in after.audit[len(before.audit):]}
        assert len(after.audit) == len(before.audit) + 3
        assert sorted(new) == ["ignored lock_granted", "ignored lock_refused", "ignored superseded"]
        assert new["ignored superseded"] == f"the lock has not superseded this rollout (it holds the lock; holder {h.id})"
        assert new["ignored lock_refused"] == "this rollout is not waiting for the lock (its request is granted)"
        assert new["ignored lock_granted"] == "this rollout is not waiting for the lock (its request is granted)"
        assert (await lock_state(env.client, a.service)).holder.workflow_id == h.id  # type: ignore[union-attr]
        await h.execute_update(RolloutWorkflow.approve, Approve(stage="us-east-1/test", approver="alice"))
        result = await outcome(h)
        lock = await poll(lambda: lock_state(env.client, a.service), lambda s: s.holder is None)
    assert result.status == "succeeded"
    assert lock.queue == []  # the rollout's own release was confirmed and freed the lock


async def test_forged_release_and_acquire_do_not_move_the_lock(env, task_queue, tmp_path):
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        ha, hb, before = await holder_and_queued(env.client, task_queue)
        service = before.service
        lock = machinery_client(env.client).get_workflow_handle(lock_id(service))
        await lock.signal("release", ha.id)  # names the holder: would hand the lock to b
        await lock.signal("release", hb.id)  # would drop b from the queue
        fake = {"workflow_id": f"rollout/{service}/9.9.9", "service": service, "version": "9.9.9", "policy": "supersede"}
        await lock.signal("acquire", fake)  # would supersede a
        await lock.signal("acquire", {"workflow_id": hb.id, "service": service, "version": "2.1.0", "policy": "supersede"})
        after = await poll(lambda: lock_state(env.client, service), lambda s: len(s.log) >= len(before.log) + 4
                           or (s.holder, s.queue) != (before.holder, before.queue))
        assert after.holder == before.holder and after.queue == before.queue
        assert after.superseded == {} and after.refused == {}
        new = after.log[len(before.log):]
        assert len(new) == 4, new
        assert new[0].startswith(f"ignored release of {ha.id}: {ha.id} still holds the lock")
        assert new[1].startswith(f"ignored release of {hb.id}: {hb.id} still waits for the lock")
        assert new[2].startswith(f"ignored acquire from {fake['workflow_id']}: no such workflow")
        assert new[3].startswith(f"ignored acquire from {hb.id}")  # already waiting (with another policy)
        state_a = await rollout_state(ha)
        assert state_a.status == "awaiting_approval" and not ignored(state_a.audit, "superseded")
        assert not any(e.action == "superseded" for e in state_a.audit)
        await ha.execute_update(RolloutWorkflow.approve, Approve(stage="us-east-1/test", approver="alice"))
        ra, rb = await outcome(ha), await outcome(hb)
    assert (ra.status, rb.status) == ("succeeded", "succeeded")


async def test_stage_signals_sent_by_hand_to_a_soaking_stage_change_nothing(env, task_queue, tmp_path):
    req = make_request(soak={"prod_hours": 2}, canary={"soak_check_minutes": 30}, approvals={"approvers": ["alice"]},
                       regions=[{"name": "us-east-1", "traffic_share": 1.0, "environments": ["prod"]}],
                       blast_radius={"canary_region": None})
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        h = await start_rollout(env.client, req, task_queue)
        before = await poll(lambda: rollout_state(h), lambda s: s.stages[0].status == "soaking")
        with pytest.raises(WorkflowUpdateFailedError) as refused:  # the update refuses mallory
            await h.execute_update(RolloutWorkflow.skip_soak, SkipSoak(stage="us-east-1/prod", by="mallory", reason="x"))
        assert str(refused.value.cause).endswith("by: 'mallory' may not approve or decide here: the name is not on the "
                                                 "list of approvers (approvals.approvers in the request)")
        stage = machinery_client(env.client).get_workflow_handle(f"{h.id}/us-east-1/prod")
        stage_before: StageDetail = await stage.query(StageWorkflow.progress)
        await stage.signal("skip_soak", "mallory: trust me")
        await stage.signal("set_hold", True)
        await stage.signal("stop", "mallory says stop")
        await stage.signal("conclude", {"action": "roll_back", "reason": "mallory"})
        await stage.signal("conclude", {"action": "keep", "reason": "mallory"})
        stage_after: StageDetail = await poll(lambda: stage.query(StageWorkflow.progress),
                                              lambda d: len(d.audit) >= 5 or d.state != stage_before.state)
        after = await rollout_state(h)
        assert frozen(after) == frozen(before) and after.audit == before.audit
        assert stage_after.state == stage_before.state and stage_after.state.status == "soaking"
        assert [(a.action, a.detail) for a in stage_after.audit] == [
            ("ignored skip_soak", "the rollout has not ended this stage's soak (only its skip_soak update can)"),
            ("ignored set_hold", "the rollout is not paused"),
            ("ignored stop", "the rollout has not stopped this stage"),
            ("ignored conclude", "the rollout has given no verdict on this stage"),
            ("ignored conclude", "the rollout has given no verdict on this stage"),
        ]
        # the validated path still ends the soak, and the stage kept the new version (no forged verdict stuck)
        await h.execute_update(RolloutWorkflow.skip_soak, SkipSoak(stage="us-east-1/prod", by="alice", reason="hotfix"))
        result = await outcome(h)
    assert result.status == "succeeded"
    assert result.stages[0].reason.startswith("soak skipped: alice: hotfix")
    assert result.stages[0].version_now == req.version


async def test_forged_stage_progress_does_not_end_a_wave(env, task_queue, tmp_path):
    req = make_request(canary={"analysis_minutes": 30})
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        h = await start_rollout(env.client, req, task_queue)
        before = await poll(lambda: rollout_state(h), lambda s: any(st.status == "analyzing" for st in s.stages)
                            and all(st.status == "analyzing" for st in s.wave_stages(1)))
        wave1 = before.wave_stages(1)
        later = [st for st in before.stages if st.wave == 2]
        for st in wave1 + later:
            await h.signal("stage_progress", {
                "key": st.key, "region": st.region, "environment": st.environment, "wave": st.wave,
                "status": "succeeded", "verdict": "pass", "score": 1.0, "report_url": "https://evil.example/report.html",
                "version_before": "1.0.0", "version_now": req.version, "awaiting_verdict": True,
            })
        await h.signal("stage_progress", {"key": "mars/prod", "region": "mars", "environment": "prod", "status": "succeeded"})
        expected = len(before.audit) + len(wave1) + len(later) + 1
        after = await poll(lambda: rollout_state(h), lambda s: len(s.audit) >= expected or frozen(s) != frozen(before))
        assert frozen(after) == frozen(before)
        assert len(after.audit) == expected
        new = after.audit[len(before.audit):]
        assert all(a.action == "ignored stage_progress" for a in new)
        confirmed = sorted((a.target, a.detail) for a in new if a.target is not None)  # asked the stage
        assert confirmed == sorted((st.key, "the stage says it is analyzing (verdict none), not succeeded (verdict pass)")
                                   for st in wave1)
        assert sum("has started no stage" in a.detail for a in new if a.target is None) == len(later) + 1
        children = await machinery_client(env.client).count_workflows(  # its stages, started through Nexus
            f"WorkflowId STARTS_WITH '{h.id}/' AND WorkflowType = 'StageWorkflow'")
        assert children.count == len(wave1)  # wave 2 has not started
        await h.execute_update(RolloutWorkflow.abort, Abort(by="alice", reason="end of test"))
        result = await outcome(h)
    assert result.status == "aborted"
    assert all(st.report_url is None and st.verdict is None for st in result.stages)



async def test_a_grant_that_could_not_be_confirmed_is_taken_by_the_rollouts_own_recheck(ts_env, task_queue, tmp_path):
    """The first look at the lock's state that names the rollout as holder fails (its worker did not answer): the
    grant signal is ignored, yet the rollout's own re-check of the lock takes the grant and the rollout runs."""
    req = make_request(**ONE_REGION)
    with first_true_answer_unconfirmable() as failed:
        async with running_worker(ts_env.client, fleet(), task_queue, tmp_path):
            h = await start_rollout(ts_env.client, req, task_queue)
            async with asyncio.timeout(120):  # today's code: the rollout stays queued for ever while the lock names it
                result = await outcome(h)
            lock = await poll(lambda: lock_state(ts_env.client, req.service), lambda s: s.holder is None)
    assert failed == [h.id]  # the true grant was once not confirmable
    assert result.status == "succeeded", result.reason
    assert [e.action for e in result.audit].count("lock-granted") == 1
    assert lock.queue == [] and f"released by {h.id}" in lock.log


async def test_a_refusal_that_could_not_be_confirmed_is_taken_by_the_rollouts_own_recheck(ts_env, task_queue, tmp_path):
    """Likewise a true refusal (policy 'reject') whose confirmation failed: the rollout does not stay queued."""
    a = make_request(**ONE_REGION, **GATED)
    b = make_request(service=a.service, version="2.1.0", on_conflict="reject", **ONE_REGION)
    with first_true_answer_unconfirmable(suffix="/2.1.0") as failed:
        async with running_worker(ts_env.client, fleet(), task_queue, tmp_path):
            with ts_env.with_time_skipping_disabled():  # a holds the lock at its gate for as long as the test needs
                ha = await start_rollout(ts_env.client, a, task_queue)
            await poll(lambda: rollout_state(ha), lambda s: s.status == "awaiting_approval")
            hb = await start_rollout(ts_env.client, b, task_queue)
            async with asyncio.timeout(120):  # today's code: b stays queued for ever
                rb = await outcome(hb)
            lock = await lock_state(ts_env.client, a.service)
            assert lock.holder is not None and lock.holder.workflow_id == ha.id and lock.queue == []
            await ha.execute_update(RolloutWorkflow.approve, Approve(stage="us-east-1/test", approver="alice"))
            ra = await outcome(ha)
    assert failed == [hb.id]
    assert rb.status == "rejected" and rb.reason == f"not started: {ha.id} is already rolling out {a.service} (on_conflict: reject)"
    assert not any(e.action == "lock-granted" for e in rb.audit)
    assert ra.status == "succeeded"
