"""`on_failure: hold` on a real dev server (#20 items 2 and 3): a failing canary holds with canary and baseline
running; a release manager retries (on a fresh window), promotes (with a reason) or rolls back through the
validated resolve_hold update; a hold nobody decides takes the request's hold.on_timeout; a hand-sent signal
decides nothing (docs/operating.md "Hold instead of rolling back")."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from activities.adapters.simulated import SimulatedFleet, VersionEffect
from bifrost_cli.ops import outcome, start_rollout
from common.types import MetricWindow, StageRef
from tests.workflows.helpers import fleet, make_request, running_worker
from tests.workflows.test_controls import refused, wait_for
from tests.workflows.test_reset_and_resubmit import FIRST_FOUR, LAST_TWO, deploys
from worker.endpoints import machinery_client
from workflows.request import RolloutRequest
from workflows.rollout.models import RolloutState
from workflows.rollout.updates import ResolveHold
from workflows.rollout.workflow import RolloutWorkflow
from workflows.stage.models import StageDetail
from workflows.stage.workflow import StageWorkflow

HELD_STAGE = "us-east-1/test"


def held_request(**overrides: Any) -> RolloutRequest:
    """One region, test then prod; it holds on failure; only alice may decide."""
    data: dict[str, Any] = {
        "regions": [{"name": "us-east-1", "traffic_share": 1.0, "on_failure": "hold"}],
        "blast_radius": {"canary_region": None}, "approvals": {"approvers": ["alice"]},
    }
    data.update(overrides)
    return make_request(**data)


def slow_canary(version: str = "2.0.0", **where: Any) -> VersionEffect:
    return VersionEffect(version=version, latency_factor=1.8, **{"regions": ["us-east-1"], "environments": ["test"], **where})


def windows_of(f: SimulatedFleet, key: str) -> list[MetricWindow]:
    """Record every window the judge asks the fleet about for stage `key` (the fleet's own fetch, wrapped)."""
    seen: list[MetricWindow] = []
    original = f.fetch

    async def fetch(stage: StageRef, metric: Any, window: MetricWindow, *args: Any) -> Any:
        if stage.key == key:
            seen.append(window)
        return await original(stage, metric, window, *args)

    f.fetch = fetch  # type: ignore[method-assign]
    return seen


def held(s: RolloutState) -> bool:
    return s.status == "held"


async def test_a_failing_canary_holds_with_canary_and_baseline_running_and_a_retry_judges_a_fresh_window(env, task_queue, tmp_path):
    f = fleet(effects=[slow_canary()])
    windows = windows_of(f, HELD_STAGE)
    req = held_request()
    async with running_worker(env.client, f, task_queue, tmp_path):
        h = await start_rollout(env.client, req, task_queue)
        state = await wait_for(h, held)
        row = state.stage(HELD_STAGE)
        assert row is not None and row.status == "held" and row.holds == 1 and "canary judged fail" in row.reason
        hold = next(x for x in state.holds if x.reason == "failure")
        assert hold.targets == [HELD_STAGE] and hold.until is not None and "resolve_hold" in (state.waiting_for or "")
        assert hold.until == hold.since + timedelta(minutes=req.hold.timeout_minutes)
        assert state.waiting_for == (f"resolve_hold on {HELD_STAGE}: retry, promote or rollback; may decide: alice; "
                                     f"times out at {hold.until.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC, then rollback "
                                     "(the request's hold.on_timeout)")
        slot = f.slot(StageRef(service=req.service, region="us-east-1", environment="test"))
        assert (slot.canary, slot.baseline, slot.primary) == ("2.0.0", "1.0.0", "1.0.0")  # kept: nothing rolled back
        assert not [c for c in f.calls if c[0] == "rollback"]
        judged_before = len(windows)
        # the fleet recovers; the retry must judge a window begun after it was asked, not the failed one again
        f.scenario.effects = []
        asked = datetime.now().astimezone()
        ack = await h.execute_update(RolloutWorkflow.resolve_hold,
                                     ResolveHold(stage=HELD_STAGE, action="retry", by="alice", reason="cache warmed"))
        assert "judged again" in ack.message
        result = await outcome(h)
    assert result.status == "succeeded", result.reason
    retried = windows[judged_before:]
    assert retried and all(w.start >= windows[0].end and w.start >= asked.replace(microsecond=0) for w in retried)
    assert [(a.who, a.action, a.target) for a in result.audit if a.action.startswith("hold")] == [
        ("bifrost", "hold", HELD_STAGE), ("alice", "hold-retry", HELD_STAGE)]
    assert result.stage(HELD_STAGE).reason.startswith("retried by alice")  # type: ignore[union-attr]


async def test_promote_needs_an_allowed_name_and_a_reason_and_is_audited(env, task_queue, tmp_path):
    f = fleet(effects=[slow_canary()])
    async with running_worker(env.client, f, task_queue, tmp_path):
        h = await start_rollout(env.client, held_request(), task_queue)
        await wait_for(h, held)
        not_listed = await refused(h, RolloutWorkflow.resolve_hold,
                                   ResolveHold(stage=HELD_STAGE, action="promote", by="mallory", reason="trust me"))
        assert not_listed == ("by: 'mallory' may not approve or decide here: the name is not on the list of approvers "
                              "(approvals.approvers in the request)")
        not_held = await refused(h, RolloutWorkflow.resolve_hold,
                                 ResolveHold(stage="us-east-1/prod", action="promote", by="alice", reason="x"))
        assert not_held == f"stage: us-east-1/prod is not held on failure; held now: {HELD_STAGE}"
        # what the Web UI would send: raw JSON, refused before the validator, naming the field
        for payload, field in [({"stage": HELD_STAGE, "action": "promote", "by": "alice"}, "reason"),
                               ({"stage": HELD_STAGE, "action": "ship-it", "by": "alice", "reason": "x"}, "action"),
                               ({"stage": HELD_STAGE, "action": "retry", "by": "alice", "force": True}, "force")]:
            with pytest.raises(WorkflowUpdateFailedError) as err:
                await h.execute_update("resolve_hold", payload)
            cause = err.value.cause
            assert isinstance(cause, ApplicationError) and field in cause.message, cause
        assert (await h.query(RolloutWorkflow.status)).status == "held"
        await h.execute_update(RolloutWorkflow.resolve_hold, ResolveHold(
            stage=HELD_STAGE, action="promote", by="alice", reason="latency is the new <b>cache</b> warming"))
        result = await outcome(h)
    assert result.status == "succeeded", result.reason
    row = result.stage(HELD_STAGE)
    assert row is not None and row.version_now == "2.0.0" and row.reason.startswith("promoted from a hold by alice")
    assert ("alice", "hold-promote", HELD_STAGE, "latency is the new <b>cache</b> warming") in [
        (a.who, a.action, a.target, a.detail) for a in result.audit]
    assert [c for c in f.calls if c[0] == "promote"][0][1] == HELD_STAGE


async def test_a_hand_sent_signal_cannot_decide_a_hold(env, task_queue, tmp_path):
    f = fleet(effects=[slow_canary()])
    async with running_worker(env.client, f, task_queue, tmp_path):
        h = await start_rollout(env.client, held_request(), task_queue)
        await wait_for(h, held)
        stage = machinery_client(env.client).get_workflow_handle(f"{h.id}/{HELD_STAGE}")
        await stage.signal("resolve", {"hold": 1, "action": "promote", "by": "mallory", "reason": "trust me"})
        await stage.signal("set_hold", False)
        async with asyncio.timeout(30):
            while True:
                detail: StageDetail = await stage.query(StageWorkflow.progress)
                if len([a for a in detail.audit if a.action.startswith("ignored")]) >= 2:
                    break
                await asyncio.sleep(0.1)
        assert detail.state.status == "held" and detail.state.version_now == "1.0.0"
        assert [a.action for a in detail.audit] == ["ignored resolve", "ignored set_hold"]
        assert "only its resolve_hold update can" in detail.audit[0].detail
        state = await h.query(RolloutWorkflow.status)
        assert state.status == "held" and not [c for c in f.calls if c[0] == "promote"]
        await h.execute_update(RolloutWorkflow.resolve_hold,
                               ResolveHold(stage=HELD_STAGE, action="rollback", by="alice", reason="really slower"))
        result = await outcome(h)
    assert result.status == "rolled_back"
    assert "held, then rolled back by alice: really slower" in result.reason


@pytest.mark.parametrize("on_timeout", ["rollback", "promote"])
async def test_a_hold_nobody_decides_takes_the_default_action(env, task_queue, tmp_path, on_timeout):
    f = fleet(effects=[slow_canary()])
    req = held_request(hold={"timeout_minutes": 0.05, "on_timeout": on_timeout})
    async with running_worker(env.client, f, task_queue, tmp_path, promote_hold_floor_minutes=0):  # the platform's call
        h = await start_rollout(env.client, req, task_queue)
        await wait_for(h, held)
        result = await outcome(h)
    decided = [a for a in result.audit if a.action.startswith("hold-")]
    assert [(a.who, a.action) for a in decided] == [("bifrost", f"hold-{on_timeout}")]
    assert "no decision within 0.05 min" in decided[0].detail
    if on_timeout == "promote":
        assert decided[0].detail.startswith("promoted a FAILED canary (score ") and "after 3 s" in decided[0].detail
    if on_timeout == "rollback":
        assert result.status == "rolled_back" and result.stage(HELD_STAGE).version_now == "1.0.0"  # type: ignore[union-attr]
    else:
        assert result.status == "succeeded" and result.stage(HELD_STAGE).version_now == "2.0.0"  # type: ignore[union-attr]


async def test_a_sibling_of_a_held_stage_waits_before_promotion_until_the_hold_is_decided(env, task_queue, tmp_path):
    """Two stages of one wave: us-east-1/test holds; eu-west-1/test, told to hold, passes its analysis (held back
    until then, so the order is certain) and waits before promotion; a promote lets both go on."""
    f = fleet(effects=[slow_canary()])
    judged = asyncio.Event()
    original = f.fetch

    async def fetch(stage: StageRef, *args: Any) -> Any:
        if stage.key == "eu-west-1/test":
            await judged.wait()
        return await original(stage, *args)

    f.fetch = fetch  # type: ignore[method-assign]
    req = make_request(regions=[{"name": "us-east-1", "environments": ["test"], "on_failure": "hold"},
                                {"name": "eu-west-1", "environments": ["test"]}],
                       blast_radius={"canary_region": None, "max_parallel_regions": 2})
    async with running_worker(env.client, f, task_queue, tmp_path):
        h = await start_rollout(env.client, req, task_queue)
        await wait_for(h, held)
        sibling = machinery_client(env.client).get_workflow_handle(f"{h.id}/eu-west-1/test")
        async with asyncio.timeout(30):  # the rollout has told the sibling (confirmed with its orders) to hold
            while not (await sibling.query(StageWorkflow.progress)).hold:
                await asyncio.sleep(0.1)
        judged.set()
        async with asyncio.timeout(30):
            while (detail := await sibling.query(StageWorkflow.progress)).state.status != "promoting":
                await asyncio.sleep(0.1)
        assert detail.hold and detail.state.verdict == "pass"
        assert not [c for c in f.calls if c[0] == "promote"]
        assert (await h.query(RolloutWorkflow.status)).status == "held"
        await h.execute_update(RolloutWorkflow.resolve_hold,
                               ResolveHold(stage="us-east-1/test", action="promote", by="bob", reason="accepted"))
        result = await outcome(h)
    assert result.status == "succeeded", result.reason
    assert sorted(c[1] for c in f.calls if c[0] == "promote") == ["eu-west-1/test", "us-east-1/test"]


async def test_resubmitting_after_a_hold_rolled_back_resumes_from_the_held_stage(env, task_queue, tmp_path):
    f = fleet(effects=[slow_canary(regions=["eu-west-1"])])
    req = make_request(rollback_scope="stage", regions=[
        {"name": "us-east-1", "traffic_share": 0.5}, {"name": "eu-west-1", "traffic_share": 0.3, "on_failure": "hold"},
        {"name": "ap-south-1", "traffic_share": 0.2}])
    async with running_worker(env.client, f, task_queue, tmp_path):
        h = await start_rollout(env.client, req, task_queue)
        state = await wait_for(h, held, timeout=90)
        assert state.stage("eu-west-1/test").status == "held"  # type: ignore[union-attr]
        await h.execute_update(RolloutWorkflow.resolve_hold,
                               ResolveHold(stage="eu-west-1/test", action="rollback", by="alice", reason="fix first"))
        assert (await outcome(h)).status == "rolled_back"
        before = deploys(f, "2.0.0")
        f.scenario.effects = []  # fixed; the same request again
        again = await outcome(await start_rollout(env.client, req, task_queue))
    assert again.status == "succeeded", again.reason
    assert {s.key: s.status for s in again.stages if s.key in FIRST_FOUR} == dict.fromkeys(FIRST_FOUR, "skipped")
    after = deploys(f, "2.0.0")
    assert {k for k in after if after[k] != before.get(k, 0)} == set(LAST_TWO)
