"""RevertWorkflow end to end on the dev server: undo a finished release, region by region, last wave first."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import CancelledError

from activities.adapters.webhooks import slack_payload
from bifrost_cli.ops import outcome, start_rollout
from common.failures import OUTCOME_MEMO
from common.links import workflow_link
from common.types import StageRef
from tests.workflows.helpers import cancel_as_release_manager, fleet, make_request, running_worker
from tests.workflows.revert_helpers import listed_closed, notices_sent, revert_input, revert_outcome, start_revert
from tests.workflows.test_canceled import scheduled_activities
from workflows.revert.models import RevertState
from workflows.revert.workflow import RevertWorkflow

REVERSED = ["eu-west-1/prod", "eu-west-1/test", "us-east-1/prod", "us-east-1/test", "ap-south-1/prod", "ap-south-1/test"]


async def _released(client, f, tq, **overrides):
    """A finished rollout of 2.0.0 over the fleet's 1.0.0; its request."""
    req = make_request(**overrides)
    h = await start_rollout(client, req, tq)
    assert (await outcome(h)).status == "succeeded"
    await listed_closed(client, h.id)
    return req, h.id


async def _running_at_a_gate(client, service, tq):
    """A rollout of 2.1.0 that holds the service lock, waiting for the approval of its wave 2."""
    gated = make_request(service=service, version="2.1.0", approvals={"gates": [{"wave": 2}], "timeout_hours": 1})
    running = await start_rollout(client, gated, tq)
    async with asyncio.timeout(60):
        while (await running.query("status")).get("status") != "awaiting_approval":
            await asyncio.sleep(0.2)
    return running


async def test_revert_puts_every_region_back_in_reverse_wave_order_without_a_canary(env, task_queue):
    client, f = env.client, fleet()
    with notices_sent() as sent:
        async with running_worker(client, f, task_queue):
            req, rid = await _released(client, f, task_queue)
            before = len(f.calls)
            state, failure = await revert_outcome(await start_revert(client, revert_input(req.service), task_queue))
    assert failure == "" and state.status == "reverted", (state.status, state.reason)
    told = [(n.event, n.rollout_id) for n in sent if n.event.startswith("revert_")]
    assert told == [("revert_started", state.revert_id), ("revert_finished", state.revert_id)]
    assert state.release == rid and state.release_version == "2.0.0"
    assert [r.key for r in state.regions] == REVERSED
    calls = f.calls[before:]
    rollbacks = [stage for op, stage, version in calls if op == "rollback" and version == "1.0.0"]
    assert rollbacks == REVERSED  # one at a time, the last wave first
    assert not [c for c in calls if c[0] in ("deploy", "promote")]  # no canary, no baseline, no promotion
    for r in state.regions:
        assert f.slot(StageRef(service=req.service, region=r.region, environment=r.environment)).primary == "1.0.0"
        assert r.version_before == "2.0.0" and r.version_now == "1.0.0" and r.status == "reverted"
        assert "healthy" in r.health, r.health
    assert state.audit[0].who == "alice" and "INC-7" in state.audit[0].detail


async def test_a_revert_is_refused_while_a_rollout_runs_and_names_it(env, task_queue):
    client, f = env.client, fleet()
    async with running_worker(client, f, task_queue):
        req, _ = await _released(client, f, task_queue)
        running = await _running_at_a_gate(client, req.service, task_queue)
        before = len(f.calls)
        state, failure = await revert_outcome(await start_revert(client, revert_input(req.service), task_queue))
    assert state.status == "rejected", (state.status, state.reason)
    assert running.id in failure and "--queue" in failure
    assert [c for c in f.calls[before:] if c[0] == "rollback"] == []


async def test_a_queued_revert_waits_for_the_rollout_and_undoes_it(env, task_queue):
    client, f = env.client, fleet()
    with notices_sent() as sent:
        async with running_worker(client, f, task_queue):
            req, first = await _released(client, f, task_queue)
            running = await _running_at_a_gate(client, req.service, task_queue)
            h = await start_revert(client, revert_input(req.service, on_conflict="queue"), task_queue)
            async with asyncio.timeout(60):
                while (await h.query(RevertWorkflow.status)).status != "queued":
                    await asyncio.sleep(0.2)
            assert (await h.query(RevertWorkflow.status)).release == first  # refused nothing: it waits
            # it tells people it queues, naming the rollout it waits behind (the lock's holder)
            async with asyncio.timeout(60):
                while not [n for n in sent if n.event == "revert_queued"]:
                    await asyncio.sleep(0.2)
            waiting = await h.query(RevertWorkflow.status)
            assert waiting.waiting_for is not None and running.id in waiting.waiting_for, waiting.waiting_for
            assert ("bifrost", "queued") in [(a.who, a.action) for a in waiting.audit]
            await running.execute_update("approve", {"wave": 2, "approver": "bob", "comment": "ok"})
            await outcome(running)
            state, failure = await revert_outcome(h)
    assert failure == "" and state.status == "reverted", (state.status, state.reason)
    assert state.release == running.id and state.release_version == "2.1.0"  # the release that ended last
    assert {r.version_before for r in state.regions} == {"2.1.0"}
    assert any(a.action == "release" for a in state.audit)
    [queued] = [n for n in sent if n.event == "revert_queued"]
    assert (queued.rollout_id, queued.hold, queued.waits_for) == (state.revert_id, "lock", running.id)
    assert f"queued behind {running.id}" in queued.text
    # the chat payload a webhook posts as it is: the rollout waited for as a field, and the revert's Web UI page
    payload = slack_payload(queued, workflow_link("http://ui.test:8233", "default", queued.rollout_id))
    fields = [x["text"] for x in payload["blocks"][1]["fields"]]  # type: ignore[index]
    assert f"*Waits for*\n{running.id}" in fields, fields
    assert "http://ui.test:8233/namespaces/default/workflows/revert%2F" in str(payload["text"])
    told = [n.event for n in sent if n.rollout_id == state.revert_id]
    assert told == ["revert_queued", "revert_started", "revert_finished"], told


async def test_a_revert_granted_at_once_is_not_told_as_queued(env, task_queue):
    """`--queue` with nobody ahead: the lock is granted at once, and no queued notice goes out."""
    client, f = env.client, fleet()
    with notices_sent() as sent:
        async with running_worker(client, f, task_queue):
            req, _ = await _released(client, f, task_queue)
            state, failure = await revert_outcome(
                await start_revert(client, revert_input(req.service, on_conflict="queue"), task_queue))
    assert state.status == "reverted", state.reason
    assert [n.event for n in sent if n.rollout_id == state.revert_id] == ["revert_started", "revert_finished"]


async def test_a_region_unhealthy_on_the_old_version_stops_the_revert_and_says_so(env, task_queue):
    client = env.client
    f = fleet(effects=[{"version": "1.0.0", "regions": ["us-east-1"], "environments": ["prod"], "latency_factor": 1.8}])
    with notices_sent() as sent:
        async with running_worker(client, f, task_queue):
            req, _ = await _released(client, f, task_queue)
            before = len(f.calls)
            state, failure = await revert_outcome(await start_revert(client, revert_input(req.service), task_queue))
    assert state.status == "failed", (state.status, state.reason)
    failed = [n for n in sent if n.event == "revert_failed"]
    assert len(failed) == 1 and "us-east-1/prod is not healthy" in failed[0].text
    assert "us-east-1/prod is not healthy on 1.0.0" in failure and "latency_p99" in failure
    assert "us-east-1/test, ap-south-1/prod, ap-south-1/test" in failure  # what still runs the release
    rollbacks = [stage for op, stage, _ in f.calls[before:] if op == "rollback"]
    assert rollbacks == REVERSED[:3]  # nothing after the unhealthy region
    assert state.row("us-east-1/prod").status == "unhealthy"


@pytest.mark.parametrize(("overrides", "field", "says"), [
    ({"to_version": "0.9.0"}, "to_version", "0.9.0 is not a version"),
    ({"to_version": "2.0.0"}, "to_version", "is the version"),
    ({"stages": ["mars-1/prod"]}, "stages", "mars-1/prod not in"),
    ({"release": "rollout/nope/1.0.0"}, "release", "no rollout"),
])
async def test_input_that_does_not_fit_the_release_is_refused_before_any_deploy(env, task_queue, overrides, field, says):
    client, f = env.client, fleet()
    async with running_worker(client, f, task_queue):
        req, _ = await _released(client, f, task_queue)
        before = len(f.calls)
        state, failure = await revert_outcome(await start_revert(client, revert_input(req.service, **overrides), task_queue))
    assert state.status == "invalid" and f"{field}: " in failure and says in failure, failure
    assert "nothing was deployed" in failure
    assert [c for c in f.calls[before:] if c[0] in ("rollback", "deploy", "promote")] == []


async def test_an_unknown_service_and_a_hand_typed_bad_input_are_refused(env, task_queue):
    client, f = env.client, fleet()
    async with running_worker(client, f, task_queue):
        state, failure = await revert_outcome(await start_revert(
            client, revert_input(f"ghost-{uuid.uuid4().hex[:6]}"), task_queue))
        assert state.status == "invalid" and "service: no finished rollout of ghost-" in failure
        # what the UI's Start Workflow could send: strict, each problem naming its field, no coercion
        h = await client.start_workflow("RevertWorkflow", {"service": "payments", "to_version": "1.0.0", "requested_by": "x",
                                                           "reason": "r", "evacuate": "yes"},
                                        id=f"revert/hand/{uuid.uuid4().hex[:6]}", task_queue=task_queue)
        with pytest.raises(WorkflowFailureError) as err:
            await h.result()
    assert "evacuate" in str(err.value.cause)
    assert f.calls == []


async def test_evacuate_moves_a_production_regions_traffic_away_before_its_deploy_and_back_after(env, task_queue, tmp_path):
    from tests.workflows.evacuation_helpers import running_worker as traffic_worker
    from tests.workflows.evacuation_helpers import simulated_registry
    from workflows.evacuation.models import EvacuationState
    from workflows.evacuation.settings import evacuation_id

    client = env.client
    registry, f = simulated_registry(ttl=1)
    quick = {"steps": [0], "health_interval_seconds": 1, "min_samples": 3, "health_check_minutes": 1 / 60}
    async with traffic_worker(client, registry, task_queue, tmp_path):
        req = make_request(evacuation=quick)
        h = await start_rollout(client, req, task_queue)
        assert (await outcome(h)).status == "succeeded"
        await listed_closed(client, h.id)
        inp = revert_input(req.service, evacuate=True, stages=["eu-west-1/test", "eu-west-1/prod"])
        state, failure = await revert_outcome(await start_revert(client, inp, task_queue))
        moves = [wf async for wf in client.list_workflows(f"WorkflowId = '{evacuation_id(req.service)}'")]
        runs = sorted(moves, key=lambda wf: wf.start_time)
        done = [await client.get_workflow_handle(wf.id, run_id=wf.run_id, result_type=EvacuationState).result()
                for wf in runs]
    assert failure == "" and state.status == "reverted", (state.status, state.reason)
    assert [r.key for r in state.regions] == ["eu-west-1/prod", "eu-west-1/test"]
    prod, test = state.regions
    assert "evacuated" in prod.traffic and "restored" in prod.traffic and test.traffic == ""
    assert [(d.direction, d.region, d.status) for d in done] == [("evacuate", "eu-west-1", "evacuated"),
                                                                 ("restore", "eu-west-1", "restored")]
    assert done[0].weights_now["eu-west-1"] == 0 and done[1].weights_after == done[0].weights_before
    assert prod.deployed_at is not None and done[0].ended_at <= prod.deployed_at <= done[1].started_at
    assert f.slot(StageRef(service=req.service, region="eu-west-1", environment="prod")).primary == "1.0.0"
    assert f.slot(StageRef(service=req.service, region="us-east-1", environment="prod")).primary == "2.0.0"  # not asked


async def test_pause_holds_before_the_next_wave_and_abort_stops_there(env, task_queue):
    from workflows.rollout.updates import Abort, Pause

    client, f = env.client, fleet()
    async with running_worker(client, f, task_queue):
        req, _ = await _released(client, f, task_queue)
        h = await start_revert(client, revert_input(req.service, health_minutes=0.1), task_queue)
        async with asyncio.timeout(60):
            while (await h.query(RevertWorkflow.status)).status != "reverting":
                await asyncio.sleep(0.1)
        await h.execute_update(RevertWorkflow.pause, Pause(by="carol", reason="looking at eu-west-1"))
        async with asyncio.timeout(60):
            while (held := await h.query(RevertWorkflow.status)).status != "paused":
                await asyncio.sleep(0.1)
        assert [r.status for r in held.regions] == ["reverted"] + ["pending"] * 5  # the first region finished
        await h.execute_update(RevertWorkflow.abort, Abort(by="carol", reason="enough"))
        state, failure = await revert_outcome(h)
        with pytest.raises(WorkflowFailureError) as raw:
            await h.result()
        desc = await h.describe()
    assert state.status == "aborted" and "aborted by carol: enough" in failure
    assert [r.status for r in state.regions] == ["reverted"] + ["pending"] * 5
    assert [(a.who, a.action) for a in state.audit if a.who == "carol"] == [("carol", "pause"), ("carol", "abort")]
    # it ends Canceled like an aborted rollout (patch aborted-revert-ends-canceled), its state in its own memo upsert
    assert isinstance(raw.value.cause, CancelledError), raw.value.cause  # no Failed `Aborted`
    assert desc.status == WorkflowExecutionStatus.CANCELED
    assert RevertState.model_validate(await desc.memo_value(OUTCOME_MEMO)) == state
    acts = await scheduled_activities(h)
    assert acts.count("cancel_run") == 1 and acts[-1] == "cancel_run", acts  # asked once for its own cancellation


async def test_request_cancellation_of_a_queued_revert_ends_it_canceled_without_asking_again(env, task_queue):
    """The Web UI's Request Cancellation on a revert queued behind a rollout: aborted, Canceled, nothing deployed."""
    client, f = env.client, fleet()
    async with running_worker(client, f, task_queue):
        req, _ = await _released(client, f, task_queue)
        await _running_at_a_gate(client, req.service, task_queue)
        h = await start_revert(client, revert_input(req.service, on_conflict="queue"), task_queue)
        async with asyncio.timeout(60):
            while (await h.query(RevertWorkflow.status)).status != "queued":
                await asyncio.sleep(0.2)
        await cancel_as_release_manager(client, h.id)
        state, failure = await revert_outcome(h)
        desc = await h.describe()
    assert desc.status == WorkflowExecutionStatus.CANCELED
    # the request names who sent it, as a rollout's does (patch cancel-names-requester-everywhere)
    assert state.status == "aborted" and state.reason.startswith("cancellation requested by rm@example.com"), state.reason
    assert failure == f"revert aborted: {state.reason}"
    assert ("rm@example.com", "cancel") in [(a.who, a.action) for a in state.audit]
    assert [r.status for r in state.regions] == ["pending"] * 6  # queued: nothing was deployed
    assert "cancel_run" not in await scheduled_activities(h)  # the request had arrived: nothing more to ask


async def test_a_later_rollout_that_changed_nothing_is_passed_over(env, task_queue):
    client = env.client
    f = fleet(effects=[{"version": "2.1.0", "latency_factor": 1.8}])
    async with running_worker(client, f, task_queue):
        req, first = await _released(client, f, task_queue)
        bad = await start_rollout(client, make_request(service=req.service, version="2.1.0"), task_queue)
        assert (await outcome(bad)).status == "rolled_back"  # every stage back on 2.0.0: nothing to undo there
        await listed_closed(client, bad.id)
        state, failure = await revert_outcome(await start_revert(client, revert_input(req.service), task_queue))
    assert failure == "" and state.status == "reverted", (state.status, state.reason)
    assert state.release == first and state.release_version == "2.0.0"
