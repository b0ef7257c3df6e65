"""Release-manager controls on a real dev server: updates, validator refusals, pause/resume, abort, windows."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError

from bifrost_cli.ops import outcome
from tests.workflows.helpers import fleet, make_request, running_worker, start
from workflows.rollout.models import RolloutState
from workflows.rollout.updates import Abort, Approve, OverrideWindow, Pause, Reject, Resume, SkipSoak
from workflows.rollout.workflow import RolloutWorkflow


async def wait_for(handle: WorkflowHandle, pred, timeout: float = 30.0) -> RolloutState:
    """Poll the status query until `pred(state)` holds; fail after `timeout` seconds."""
    async with asyncio.timeout(timeout):
        while True:
            state = await handle.query(RolloutWorkflow.status)
            if pred(state):
                return state
            await asyncio.sleep(0.1)


async def refused(handle: WorkflowHandle, update, arg) -> str:
    """The one-line reason an update was refused; refusals carry no stack trace for the UI to show."""
    with pytest.raises(WorkflowUpdateFailedError) as info:
        await handle.execute_update(update, arg)
    cause = info.value.cause
    assert isinstance(cause, ApplicationError) and cause.type in ("Refused", "InvalidPayload"), cause
    assert cause.failure is not None and cause.failure.stack_trace == ""
    return cause.message


async def accepted_updates(handle: WorkflowHandle) -> list[str]:
    names = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            names.append(event.workflow_execution_update_accepted_event_attributes.accepted_request.input.name)
    return names


GATED = {"gates": [{"stage": "us-east-1/prod"}], "approvers": ["alice", "bob"]}


async def test_approval_gate_with_refusals_then_approve(env, task_queue, tmp_path):
    req = make_request(approvals=GATED)
    f = fleet()
    async with running_worker(env.client, f, task_queue, tmp_path):
        h = await start(env.client, req, task_queue)
        state = await wait_for(h, lambda s: s.status == "awaiting_approval")
        assert state.pending_approvals == ["us-east-1/prod"] and state.awaiting_wave == 4
        assert state.stage("us-east-1/prod").status == "pending"
        # the gate says who must act and when it times out, into what (the UI's "Waiting for", `bifrost status`)
        gate = next(x for x in state.holds if x.reason == "approval")
        assert gate.until == gate.since + timedelta(hours=req.approvals.timeout_hours)
        assert state.waiting_for == (f"approval of wave 4 (gates: us-east-1/prod); may decide: alice, bob; times out at "
                                     f"{gate.until.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC, then the rollout is rejected "
                                     "and rolls back")
        # refusals, each with a reason, none recorded in history
        not_listed = await refused(h, RolloutWorkflow.approve, Approve(stage="us-east-1/prod", approver="mallory"))
        # the one approver check (workflows/controls.check_approver): the field, the name, the allowed names
        assert not_listed == ("approver: 'mallory' may not approve or decide here: the name is not on the list of "
                              "approvers (approvals.approvers in the request)")
        assert await refused(h, RolloutWorkflow.reject, Reject(stage="us-east-1/prod", approver="mallory",
                                                               reason="x")) == not_listed
        assert "wave 6 is not waiting for approval; wave 4 is (us-east-1/prod)" in await refused(
            h, RolloutWorkflow.approve, Approve(stage="eu-west-1/prod", approver="alice"))
        # payloads as the UI sends them: plain JSON, checked field by field before the validator
        assert "unknown field 'approved_by'; expected 'approver'" in await refused(
            h, "approve", {"wave": 4, "approved_by": "alice"})
        assert "exactly one of" in await refused(h, "approve", {"approver": "alice"})
        assert "expected a JSON object" in await refused(h, "approve", "alice")
        assert "is not paused" in await refused(h, RolloutWorkflow.resume, Resume(by="alice"))
        assert "not waiting for a deployment window" in await refused(
            h, RolloutWorkflow.override_window, OverrideWindow(stage="us-east-1/prod", by="alice", reason="x"))
        assert "unknown stage 'mars/prod'" in await refused(
            h, RolloutWorkflow.skip_soak, SkipSoak(stage="mars/prod", by="alice", reason="x"))
        ack = await h.execute_update(RolloutWorkflow.approve, Approve(wave=4, approver="alice", comment="ship it"))
        assert ack.message == "approved wave 4 (us-east-1/prod) by alice"
        result = await outcome(h)
    assert result.status == "succeeded"
    assert await accepted_updates(h) == ["approve"]
    approvals = [a for a in result.audit if a.action == "approve"]
    assert [(a.who, a.target, a.detail) for a in approvals] == [("alice", "wave-4", "ship it")]


async def test_current_details_say_how_to_act(env, task_queue, tmp_path):
    req = make_request(approvals=GATED)
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        h = await start(env.client, req, task_queue)
        await wait_for(h, lambda s: s.status == "awaiting_approval")
        meta = await h.query("__temporal_workflow_metadata")
        details = meta.current_details if hasattr(meta, "current_details") else meta["currentDetails"]
        assert "AWAITING APPROVAL" in details
        assert "**If approved:** wave 4 releases us-east-1/prod, 50% of production traffic" in details
        assert '`approve` `{"wave": 4, "approver": "<your name>", "comment": "looks good"}`' in details
        summary = await h.query(RolloutWorkflow.summary)
        assert summary.status == "awaiting_approval" and summary.stages["us-east-1/prod"] == "pending, 1.0.0"
        # a gate can be named by any stage of its wave
        await h.execute_update(RolloutWorkflow.reject, Reject(stage="us-east-1/prod", approver="bob", reason="error budget spent"))
        result = await outcome(h)
    assert result.status == "rejected"
    assert "rejected by bob: error budget spent" in result.reason
    assert all(s.version_now == "1.0.0" for s in result.stages)  # scope all: everything went back


async def attributes(handle: WorkflowHandle) -> dict[str, str]:
    """The rollout's Bifrost search attributes as the server holds them now."""
    described = await handle.describe()
    return {pair.key.name: str(pair.value) for pair in described.typed_search_attributes
            if pair.key.name.startswith("Bifrost")}


async def published_attributes(handle: WorkflowHandle) -> list[dict[str, str]]:
    """The rollout's Bifrost search attributes after each upsert in its own history, in order."""
    converter = DataConverter.default.payload_converter
    now: dict[str, str] = {}
    seen = []
    async for event in handle.fetch_history_events():
        if event.event_type != EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            continue
        fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
        for name, payload in fields.items():
            if name.startswith("Bifrost"):
                now[name] = str(converter.from_payloads([payload])[0])
        seen.append(dict(now))
    return seen


async def attributes_when(handle: WorkflowHandle, pred, timeout: float = 30.0) -> dict[str, str]:
    """The rollout's search attributes once `pred` holds for them, or the last seen after `timeout` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not pred(seen := await attributes(handle)) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.1)
    return seen


async def test_search_attributes_and_the_bold_row_follow_the_rollout(env, task_queue, tmp_path):
    req = make_request(approvals={"gates": [{"wave": 2}]})
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        h = await start(env.client, req, task_queue)
        await wait_for(h, lambda s: s.status == "awaiting_approval")
        at_gate = await attributes(h)
        # waiting for the first production wave: the rollout has changed test only
        assert (at_gate["BifrostStatus"], at_gate["BifrostStage"], at_gate["BifrostEnvironment"]) == \
            ("awaiting_approval", "ap-south-1/prod", "test")
        meta = await h.query("__temporal_workflow_metadata")
        details = meta.current_details if hasattr(meta, "current_details") else meta["currentDetails"]
        assert "**ap-south-1/prod**" in details and "**ap-south-1/test**" not in details
        await h.execute_update(RolloutWorkflow.approve, Approve(wave=2, approver="dave"))
        await wait_for(h, lambda s: s.stage("ap-south-1/prod").status != "pending")
        result = await outcome(h)
        done = await attributes(h)
        # the prod stage's moment on the list may be shorter than any poll: read what the run published
        published = await published_attributes(h)
    assert result.status == "succeeded"
    moments = [(a.get("BifrostStage"), a.get("BifrostEnvironment")) for a in published]
    assert ("ap-south-1/prod", "prod") in moments
    # while the prod stage ran the rollout no longer read "test"; before it, never "prod"
    first_prod = moments.index(("ap-south-1/prod", "prod"))
    assert all(env != "prod" for _, env in moments[:first_prod])
    # an ended rollout keeps the furthest environment it changed: "rolled back from prod" is one list query
    assert (done["BifrostStatus"], done["BifrostStage"], done["BifrostEnvironment"]) == ("succeeded", "-", "prod")


async def test_environment_stays_prod_at_a_later_gate_and_paused_after_a_prod_wave(env, task_queue, tmp_path):
    """Waves alternate test and prod: at the last gate the latest wave started is a test wave, but two prod
    stages are already on the new version; a rollout paused after its first prod wave has changed prod too.
    Both were `test` when BifrostEnvironment followed the latest wave started."""
    req = make_request(approvals={"gates": [{"wave": 6}]})
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        h = await start(env.client, req, task_queue)
        at_gate = await wait_for(h, lambda s: s.status == "awaiting_approval", timeout=90)
        assert [st.key for st in at_gate.stages if st.version_now == req.version] == \
            ["ap-south-1/test", "ap-south-1/prod", "us-east-1/test", "us-east-1/prod", "eu-west-1/test"]
        seen = await attributes_when(h, lambda a: a["BifrostStatus"] == "awaiting_approval")
        assert (seen["BifrostStage"], seen["BifrostEnvironment"]) == ("eu-west-1/prod", "prod")
        await h.execute_update(RolloutWorkflow.abort, Abort(by="erin", reason="not today"))
        await outcome(h)
        assert (await attributes(h))["BifrostEnvironment"] == "prod"
        # paused after its first prod wave and the test wave after it (the latest wave started is a test wave)
        paused_req = make_request(approvals={"gates": [{"wave": 4}]})
        p = await start(env.client, paused_req, task_queue)
        await wait_for(p, lambda s: s.status == "awaiting_approval", timeout=90)
        await p.execute_update(RolloutWorkflow.pause, Pause(by="carol", reason="after the first prod wave"))
        await p.execute_update(RolloutWorkflow.approve, Approve(wave=4, approver="dave"))  # the pause holds before it
        held = await wait_for(p, lambda s: s.status == "paused")
        assert held.stage("us-east-1/prod").status == "pending"
        assert held.stage("ap-south-1/prod").version_now == held.stage("us-east-1/test").version_now == paused_req.version
        seen = await attributes_when(p, lambda a: a["BifrostStatus"] == "paused")
        assert (seen["BifrostStatus"], seen["BifrostEnvironment"]) == ("paused", "prod")
        await p.execute_update(RolloutWorkflow.abort, Abort(by="erin", reason="done"))
        await outcome(p)


async def test_pause_holds_before_the_next_wave_until_resume(env, task_queue, tmp_path):
    req = make_request(approvals={"gates": [{"wave": 3}]})
    f = fleet()
    async with running_worker(env.client, f, task_queue, tmp_path):
        h = await start(env.client, req, task_queue)
        await wait_for(h, lambda s: s.status == "awaiting_approval")
        await h.execute_update(RolloutWorkflow.pause, Pause(by="carol", reason="incident elsewhere"))
        assert "already paused" in await refused(h, RolloutWorkflow.pause, Pause(by="carol"))
        gated = await h.query(RolloutWorkflow.status)
        # typed holds: the gate holds the rollout; the pause is recorded and takes hold at the next safe point
        assert [(x.reason, x.in_force) for x in gated.holds] == [("approval", True), ("paused", False)]
        assert (gated.phase, gated.status, gated.holds[1].by, gated.holds[1].why) == \
            ("running", "awaiting_approval", "carol", "incident elsewhere")
        await h.execute_update(RolloutWorkflow.approve, Approve(wave=3, approver="dave"))
        state = await wait_for(h, lambda s: s.status == "paused")
        assert "resume" in (state.waiting_for or "")
        assert [(x.reason, x.in_force, x.releases, x.at) for x in state.holds] == [("paused", True, "resume", "before wave 3")]
        assert not [c for c in f.calls if c[1] == "us-east-1/test"]  # wave 3 has not started
        await h.execute_update(RolloutWorkflow.resume, Resume(by="carol"))
        result = await outcome(h)
    assert result.status == "succeeded" and result.holds == [] and result.phase == "succeeded"
    actions = [(a.who, a.action) for a in result.audit if a.who != "bifrost"]
    assert actions == [("ci", "submit"), ("carol", "pause"), ("dave", "approve"), ("carol", "resume")]


async def test_abort_mid_soak_rolls_back(env, task_queue, tmp_path):
    req = make_request(soak={"prod_hours": 2}, canary={"soak_check_minutes": 30})
    f = fleet()
    async with running_worker(env.client, f, task_queue, tmp_path):
        h = await start(env.client, req, task_queue)
        await wait_for(h, lambda s: s.stage("ap-south-1/prod").status == "soaking")
        assert "is not soaking" in await refused(
            h, RolloutWorkflow.skip_soak, SkipSoak(stage="ap-south-1/test", by="x", reason="y"))
        await h.execute_update(RolloutWorkflow.abort, Abort(by="erin", reason="customer reports"))
        result = await outcome(h)
    assert result.status == "aborted"
    assert result.reason == "aborted by erin: customer reports"
    assert all(s.version_now == "1.0.0" for s in result.stages)
    assert all(v["primary"] == "1.0.0" for v in f.snapshot().values())
    stages = {s.key: s for s in result.stages}
    assert stages["ap-south-1/prod"].reason.startswith("stopped: aborted by erin: customer reports")
    assert stages["ap-south-1/prod"].status == "rolled_back"


async def test_skip_soak_ends_a_soak_early(env, task_queue, tmp_path):
    req = make_request(soak={"prod_hours": 2}, canary={"soak_check_minutes": 30},
                       regions=[{"name": "us-east-1", "traffic_share": 1.0, "environments": ["prod"]}],
                       blast_radius={"canary_region": None})
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        h = await start(env.client, req, task_queue)
        await wait_for(h, lambda s: s.stage("us-east-1/prod").status == "soaking")
        await h.execute_update(RolloutWorkflow.skip_soak, SkipSoak(stage="us-east-1/prod", by="frank", reason="hotfix"))
        result = await outcome(h)
    assert result.status == "succeeded"
    assert result.stages[0].reason == "soak skipped: frank: hotfix"


async def test_override_window_starts_a_frozen_stage(env, task_queue, tmp_path):
    today = datetime.now(UTC).date().isoformat()
    req = make_request(regions=[{"name": "us-east-1", "traffic_share": 1.0, "freeze_dates": [today], "environments": ["prod"]}],
                       blast_radius={"canary_region": None}, approvals={"approvers": ["gina"]})
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        h = await start(env.client, req, task_queue)
        state = await wait_for(h, lambda s: s.status == "waiting_window")
        assert "us-east-1/prod" in state.waiting_for
        assert "by: 'hal' may not approve or decide here: the name is not on the list of approvers (approvals.approvers in the request)" in await refused(
            h, RolloutWorkflow.override_window, OverrideWindow(stage="us-east-1/prod", by="hal", reason="x"))
        await h.execute_update(RolloutWorkflow.override_window, OverrideWindow(stage="us-east-1/prod", by="gina", reason="sev1 fix"))
        result = await outcome(h)
    assert result.status == "succeeded"
    assert [a.action for a in result.audit if a.who == "gina"] == ["override-window"]
    assert result.window_overrides == ["us-east-1/prod"]  # in the state (the status query, the result)
