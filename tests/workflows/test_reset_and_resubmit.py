"""A failed rollout resubmitted, or reset from the Web UI, continues without deploying twice or breaking the lock
(#20 items 3 and 5; docs/operating.md "Reset and resubmit")."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.service import RPCError

from activities.adapters.simulated import SimulatedFleet, VersionEffect
from bifrost_cli.ops import outcome, start_rollout
from tests.workflows.helpers import fleet, make_request, running_worker
from workflows.request import RolloutRequest
from workflows.rollout.models import RolloutState
from workflows.rollout.updates import Approve
from workflows.rollout.workflow import RolloutWorkflow

DEPLOYS = ("deploy_canary", "deploy_baseline", "promote")
FIRST_FOUR = ["ap-south-1/test", "ap-south-1/prod", "us-east-1/test", "us-east-1/prod"]
LAST_TWO = ["eu-west-1/test", "eu-west-1/prod"]


def deploys(f: SimulatedFleet, version: str) -> dict[str, int]:
    """How many deploy-like calls each stage got for `version` (canary, promotion; a retry counts too)."""
    counts: dict[str, int] = {}
    for op, key, v in f.calls:
        if op in DEPLOYS and v == version:
            counts[key] = counts.get(key, 0) + 1
    return counts


async def reset(client: Client, handle: WorkflowHandle, which: str) -> str:
    """What the Web UI's Reset does: replay the run up to a workflow task ("first" or "last") and go on in a new run."""
    history = await handle.fetch_history()
    done = [e.event_id for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED]
    run_id = history.run_id
    resp = await client.workflow_service.reset_workflow_execution(ResetWorkflowExecutionRequest(
        namespace=client.namespace, workflow_execution=WorkflowExecution(workflow_id=handle.id, run_id=run_id),
        reason=f"test: reset to the {which} workflow task", request_id=str(uuid.uuid4()),
        workflow_task_finish_event_id=done[0] if which == "first" else done[-1]))
    return resp.run_id


async def _failed_at_eu_west(env: Any, task_queue: str, f: SimulatedFleet) -> tuple[RolloutRequest, WorkflowHandle]:
    """A rollout (scope `stage`) whose eu-west-1/test deploy fails: the first four stages keep 2.0.0."""
    req = make_request(rollback_scope="stage")
    h = await start_rollout(env.client, req, task_queue)
    state = await outcome(h)
    assert state.status == "rolled_back", state.reason
    assert {s.key: s.version_now for s in state.stages if s.key in FIRST_FOUR} == dict.fromkeys(FIRST_FOUR, "2.0.0")
    assert deploys(f, "2.0.0").keys() == {*FIRST_FOUR, "eu-west-1/test"}
    return req, h


async def test_resubmitting_after_a_failure_resumes_from_the_failed_stage(env, task_queue):
    f = fleet(effects=[VersionEffect(version="2.0.0", regions=["eu-west-1"], environments=["test"], fail_deploy=True)])
    async with running_worker(env.client, f, task_queue):
        req = make_request(rollback_scope="stage", approvals={"gates": [{"wave": 2}, {"wave": 6}]})
        h = await start_rollout(env.client, req, task_queue)
        await _wait_for(h, lambda s: s.status == "awaiting_approval")
        await h.execute_update(RolloutWorkflow.approve, Approve(wave=2, approver="alice"))
        assert (await outcome(h)).status == "rolled_back"
        before = deploys(f, "2.0.0")
        assert before.keys() == {*FIRST_FOUR, "eu-west-1/test"}
        f.scenario.effects = []  # the cause is fixed; the same request is sent again
        again = await start_rollout(env.client, req, task_queue)
        # wave 2 (already on 2.0.0) is not gated again; wave 6, which has not run, is
        waiting = await _wait_for(again, lambda s: s.status == "awaiting_approval")
        assert waiting.awaiting_wave == 6
        await again.execute_update(RolloutWorkflow.approve, Approve(wave=6, approver="alice"))
        state = await outcome(again)
    assert state.status == "succeeded", state.reason
    assert [e.target for e in state.audit if e.action == "wave-already-done"] == [f"wave-{w}" for w in range(1, 5)]
    skipped = {s.key: s.status for s in state.stages if s.key in FIRST_FOUR}
    assert skipped == dict.fromkeys(FIRST_FOUR, "skipped")  # already on 2.0.0: not deployed, judged or soaked again
    after = deploys(f, "2.0.0")
    assert {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}.keys() == set(LAST_TWO)


@pytest.mark.parametrize("which", ["first", "last"])
async def test_a_reset_failed_rollout_deploys_nothing_twice_and_leaves_the_lock_usable(env, task_queue, which):
    f = fleet(effects=[VersionEffect(version="2.0.0", regions=["eu-west-1"], environments=["test"], fail_deploy=True)])
    async with running_worker(env.client, f, task_queue):
        req, h = await _failed_at_eu_west(env, task_queue, f)
        before = deploys(f, "2.0.0")
        f.scenario.effects = []
        run = await reset(env.client, h, which)
        new_run = env.client.get_workflow_handle_for(RolloutWorkflow.run, h.id, run_id=run)
        try:
            state = await new_run.result()
        except WorkflowFailureError as err:
            state = None
            failure = err
        after = deploys(f, "2.0.0")
        # a later version of the service still gets the lock and finishes
        later = await start_rollout(env.client, make_request(service=req.service, version="2.1.0"), task_queue)
        assert (await outcome(later)).status == "succeeded"
    new_deploys = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    if which == "first":  # everything after the first task runs again: stages on 2.0.0 are skipped
        assert state is not None and state.status == "succeeded"
        assert new_deploys.keys() == set(LAST_TWO)
        assert all(n <= 3 for n in new_deploys.values())  # canary, baseline, promote: once each
    else:  # the last task ends the run the same way: nothing is deployed
        assert state is None and "rolled back" in str(failure.cause)
        assert new_deploys == {}


async def test_a_rollout_reset_while_it_holds_the_lock_gets_it_back_deploys_nothing_twice_and_frees_it(env, task_queue):
    f = fleet()
    async with running_worker(env.client, f, task_queue):
        req = make_request(approvals={"gates": [{"wave": 2}]})
        h = await start_rollout(env.client, req, task_queue)
        await _wait_for(h, lambda s: s.status == "awaiting_approval")
        run = await reset(env.client, h, "first")  # the running run ends; its stage is cancelled and keeps 2.0.0
        new_run = env.client.get_workflow_handle_for(RolloutWorkflow.run, h.id, run_id=run)
        await _wait_for(new_run, lambda s: s.status == "awaiting_approval")
        await new_run.execute_update(RolloutWorkflow.approve, Approve(wave=2, approver="alice"))
        state = await outcome(new_run)
        later = await start_rollout(env.client, make_request(service=req.service, version="2.1.0"), task_queue)
        assert (await outcome(later)).status == "succeeded"
    assert state.status == "succeeded", state.reason
    assert {s.key: s.status for s in state.stages}["ap-south-1/test"] == "skipped"  # deployed by the first run
    twice = {(op, key): n for (op, key), n in Counter((op, key) for op, key, v in f.calls
                                                       if op in DEPLOYS and v == "2.0.0").items() if n > 1}
    assert twice == {}
    assert deploys(f, "2.0.0").keys() == {*FIRST_FOUR, *LAST_TWO}


async def _wait_for(h: WorkflowHandle, pred: Callable[[RolloutState], bool], timeout: float = 90.0) -> RolloutState:
    """Poll the status query until `pred` holds (a new run may not have answered its first task yet)."""
    async with asyncio.timeout(timeout):
        while True:
            try:
                s = await h.query(RolloutWorkflow.status)
                if pred(s):
                    return s
            except RPCError:
                pass
            await asyncio.sleep(0.2)


async def test_a_reset_run_opens_with_one_reset_line_and_status_names_who_reset_it(env, task_queue, monkeypatch, capsys):
    """The signals a reset re-applies were one "ignored" line each (10 here); they fold into the run's one `reset`
    line, and `bifrost status` says when and why it was reset (and by whom, when the server records it), from the
    history's reset event."""
    from bifrost_cli import ops

    monkeypatch.setenv("TEMPORAL_ADDRESS", env.client.service_client.config.target_host)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", env.client.namespace)
    f = fleet(effects=[VersionEffect(version="2.0.0", regions=["eu-west-1"], environments=["test"], fail_deploy=True)])
    async with running_worker(env.client, f, task_queue):
        _, h = await _failed_at_eu_west(env, task_queue, f)
        f.scenario.effects = []
        history = await h.fetch_history()
        first = next(e.event_id for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
        resp = await env.client.workflow_service.reset_workflow_execution(ResetWorkflowExecutionRequest(
            namespace=env.client.namespace, workflow_execution=WorkflowExecution(workflow_id=h.id, run_id=history.run_id),
            reason="INC-5 fixed, go on", request_id=str(uuid.uuid4()), workflow_task_finish_event_id=first,
            identity="carol@example.com"))
        state = await env.client.get_workflow_handle_for(RolloutWorkflow.run, h.id, run_id=resp.run_id).result()
        assert state.status == "succeeded", state.reason
        assert [a.action for a in state.audit[:2]] == ["reset", "submit"], [(a.action, a.detail) for a in state.audit[:12]]
        assert not [a for a in state.audit if a.action.startswith("ignored")]
        assert f"a new run after a Reset of run {history.run_id}" in state.audit[0].detail
        assert "stage_progress" in state.audit[0].detail, state.audit[0].detail
        capsys.readouterr()
        assert await ops.show_status(h.id, as_json=False, console=ops.Console(width=300)) == 0
    out = capsys.readouterr().out
    # the dev server (1.32) records its own identity for a reset, not the request's: the reason is what names the person
    assert "RESET at " in out and f": INC-5 fixed, go on (from run {history.run_id}; the server records no name" in out, out
