"""Evacuations on a real dev server over the simulated fleet: pre-warm, steps, health, alarms, controls, restore.

The simulated fleet models each region's share of traffic and its capacity: a receiver that gets traffic it
was not scaled for becomes slower, so an evacuation without pre-warm alarms and one with it does not.
"""

from __future__ import annotations

import asyncio
from datetime import UTC
from pathlib import Path
from urllib.parse import unquote

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.exceptions import CancelledError

from bifrost_cli.exits import EXIT_ABORTED
from bifrost_cli.traffic import exit_code_for as traffic_exit_code
from bifrost_cli.traffic import traffic_outcome
from tests.workflows.evacuation_helpers import (
    evacuation,
    running_worker,
    service,
    simulated_registry,
    start,
    wait_for,
)
from tests.workflows.helpers import cancel_as_release_manager
from workflows.evacuation.details import evacuation_details
from workflows.evacuation.models import AbortShift, ApproveShift, EvacuationState
from workflows.evacuation.workflow import EvacuationWorkflow
from workflows.rollout.updates import Pause, Resume

EVEN = {"us-east-1": 100, "eu-west-1": 100, "ap-south-1": 100}
STEP_1 = {"us-east-1": 116, "eu-west-1": 67, "ap-south-1": 117}
EVACUATED = {"us-east-1": 150, "eu-west-1": 0, "ap-south-1": 150}


async def weights_of(registry, svc: str) -> dict[str, int]:
    return await registry.traffic_target("eu-west-1", "prod").router_for(svc).weights()


async def aborted(handle) -> tuple[EvacuationState, str]:
    """An aborted evacuation started by hand ends Canceled, as an aborted rollout does (patch aborted-ends-canceled):
    its state is the run's memo, which the CLI reads back (and exits 3 for)."""
    with pytest.raises(WorkflowFailureError) as err:
        await handle.result()
    assert isinstance(err.value.cause, CancelledError), err.value.cause
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
    state, message = await traffic_outcome(handle)
    assert state is not None and traffic_exit_code(state.status) == EXIT_ABORTED
    return state, message


async def refused(handle, update, arg) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as info:
        await handle.execute_update(update, arg)
    return str(info.value.cause)


async def test_prewarmed_evacuation_moves_traffic_step_by_step_and_stays_healthy(env, task_queue, tmp_path):
    registry, fleet = simulated_registry()
    svc = service()
    async with running_worker(env.client, registry, task_queue, tmp_path):
        handle = await start(env.client, evacuation(svc), task_queue)
        result: EvacuationState = await handle.result()
        meta = await handle.query("__temporal_workflow_metadata")
        drawn = [Path(unquote(url.removeprefix("file://"))) for st in result.steps for url in st.reports.values()]
        async with asyncio.timeout(90):  # drawn beside the evacuation's work (nobody waits for it), by this worker
            while not all(p.exists() for p in drawn):
                await asyncio.sleep(0.2)
    assert result.status == "evacuated", result.reason
    assert result.weights_before == EVEN and result.weights_after == EVACUATED == await weights_of(registry, svc)
    assert [s.weights for s in result.steps] == result.planned == [STEP_1, {"us-east-1": 133, "eu-west-1": 33, "ap-south-1": 134}, EVACUATED]
    assert [s.level for s in result.steps] == [67, 33, 0] and all(s.healthy for s in result.steps)
    assert {(v.region, v.metric) for v in result.steps[0].values} == \
        {(r, m) for r in ("us-east-1", "ap-south-1") for m in ("latency_p99", "error_rate")}  # the receivers' health
    assert all(v.before is not None and v.after is not None and v.before_n > 0 for v in result.steps[0].values)
    # receivers were scaled before the first shift: ceil(4 x 1.5 x 1.2) = 8; the evacuated region is left alone
    assert result.replicas_before == {"us-east-1": 4, "eu-west-1": 4, "ap-south-1": 4}
    assert result.replicas_after == {"us-east-1": 8, "eu-west-1": 4, "ap-south-1": 8}
    scales = [c for c in fleet.calls if c[0] == "scale"]
    assert sorted(scales) == [("scale", "ap-south-1/prod", "8"), ("scale", "us-east-1/prod", "8")]
    assert result.prewarmed_at is not None and result.prewarmed_at <= result.steps[0].applied_at
    for step in result.steps:  # at least the TTL (1 s) between a step and its health check
        assert (step.checked_at - step.applied_at).total_seconds() >= 1
    first = result.audit[0]
    assert (first.who, first.action, first.detail) == ("alice", "evacuate", "eu-west-1: INC-42 latency in eu-west-1")
    assert [a.action for a in result.audit].count("step") == 3
    details = meta.current_details if hasattr(meta, "current_details") else meta["currentDetails"]
    assert "Evacuation of eu-west-1" in details and "Requested by **alice**: INC-42 latency in eu-west-1" in details
    assert "| eu-west-1 (evacuated) | 100 | 0 | 0 | 4 | 4 |" in details
    # each look links each receiver's report, drawn by a ReportWorkflow as a stage's analyses are: the receiver's
    # primary before the shift against after the step, in the worker's report folder
    for step in result.steps:
        assert sorted(step.reports) == ["ap-south-1", "us-east-1"], step.reports
        assert all(url.startswith(tmp_path.resolve().as_uri()) for url in step.reports.values()), step.reports
    url = result.steps[0].reports["us-east-1"]
    assert f"us-east-1 report (`{url}`)" in evacuation_details(result)  # a worker-local file: shown, not linked
    assert len(drawn) == 6
    page = Path(unquote(url.removeprefix("file://"))).read_text()
    assert "health after the traffic moved" in page and "latency_p99" in page


async def test_without_prewarm_the_overloaded_receivers_alarm_and_traffic_returns_to_the_last_healthy_step(env, task_queue, tmp_path):
    registry, fleet = simulated_registry()
    svc = service()
    async with running_worker(env.client, registry, task_queue, tmp_path):
        result = await (await start(env.client, evacuation(svc, prewarm=False), task_queue)).result()
    assert result.status == "reverted", result.reason
    assert [s.healthy for s in result.steps] == [True, False]  # at 67% the receivers cope; at 33% they are at 80% load
    assert "alarm after step 2" in result.reason and "latency_p99" in result.reason and "back at step 1 (67%)" in result.reason
    assert result.step == 1 and result.weights_after == STEP_1 == await weights_of(registry, svc)
    assert not [c for c in fleet.calls if c[0] == "scale"] and result.replicas_after == result.replicas_before


async def test_restore_walks_back_and_scales_the_receivers_down(env, task_queue, tmp_path):
    registry, fleet = simulated_registry()
    svc = service()
    async with running_worker(env.client, registry, task_queue, tmp_path):
        evacuated = await (await start(env.client, evacuation(svc, steps=[50, 0]), task_queue)).result()
        assert evacuated.status == "evacuated" and evacuated.replicas_after["us-east-1"] == 8
        restore = evacuated.restore_input(requested_by="bob", reason="INC-42 fixed")
        assert restore.restore_to is not None and restore.restore_to.weights == EVEN and restore.steps == [50, 0]
        result = await (await start(env.client, restore, task_queue)).result()
    assert result.status == "restored", result.reason
    assert [s.level for s in result.steps] == [50, 100]
    assert result.steps[0].weights["eu-west-1"] / sum(result.steps[0].weights.values()) == pytest.approx(1 / 6, abs=0.01)
    assert result.weights_after == EVEN == await weights_of(registry, svc)
    assert result.replicas_after == {"us-east-1": 4, "eu-west-1": 4, "ap-south-1": 4}  # receivers scaled back down
    assert "eu-west-1: look" in result.steps[0].health  # the restored region is the one whose health is checked
    assert result.audit[0].who == "bob" and result.request_reason == "INC-42 fixed"
    # the page lists the levels the restore walks, in its order (not the evacuation's 50, 0 reversed), and each
    # health look's values: the restored region's metrics, before the shift and after the step
    details = evacuation_details(result)
    assert "levels 50%, 100%;" in details, details
    assert {(v.region, v.metric) for v in result.steps[0].values} == {("eu-west-1", "latency_p99"), ("eu-west-1", "error_rate")}
    # the region had no traffic before the restore, so it is judged against the receiver serving the most, over the
    # same window: a comparison with values and n on both sides, named on the page
    assert result.steps[0].healthy is True and result.steps[0].compared_with == {"eu-west-1": "us-east-1 over the same window"}
    assert all(v.before is not None and v.before_n > 0 and v.after_n > 0 and v.classification == "Pass"
               for v in result.steps[0].values), result.steps[0].values
    assert "**healthy** — " in details and "  - eu-west-1 latency\\_p99: us-east-1 over the same window " in details, details


class _Silent:
    """A metric source with no samples at all (a metrics backend that lost the region)."""

    async def fetch(self, stage, metric, window, baseline, canary):
        from canary.config import MetricSamples

        return MetricSamples(name=metric.name, baseline=[], canary=[])


async def test_a_restore_with_no_data_does_not_proceed(env, task_queue, tmp_path, monkeypatch):
    """No data is no evidence: the restore stops after its first step and puts the weights back, the look shown
    as "no data", never as healthy."""
    registry, _ = simulated_registry()
    svc = service()
    async with running_worker(env.client, registry, task_queue, tmp_path):
        evacuated = await (await start(env.client, evacuation(svc, steps=[50, 0]), task_queue)).result()
        assert evacuated.status == "evacuated"
        monkeypatch.setattr(registry, "metrics", lambda stage: _Silent())
        result = await (await start(env.client, evacuated.restore_input(requested_by="bob"), task_queue)).result()
    assert result.status == "reverted", result.reason
    assert "no data" in result.reason and len(result.steps) == 1 and result.steps[0].healthy is None
    assert result.weights_after == EVACUATED == await weights_of(registry, svc)
    details = evacuation_details(result)
    assert "**no data** — NO DATA (eu-west-1 latency\\_p99, eu-west-1 error\\_rate)" in details, details
    assert "healthy" not in details.split("Steps:")[1].split("Audit trail")[0], details


async def test_pause_resume_and_validators_that_name_the_problem(env, task_queue, tmp_path):
    registry, _ = simulated_registry(ttl=2)
    svc = service()
    async with running_worker(env.client, registry, task_queue, tmp_path):
        h = await start(env.client, evacuation(svc), task_queue)
        await wait_for(h, lambda s: s.step == 1)
        assert "not paused" in await refused(h, EvacuationWorkflow.resume, Resume(by="alice"))
        assert "not waiting for approval" in await refused(h, EvacuationWorkflow.approve, ApproveShift(approver="alice"))
        await h.execute_update(EvacuationWorkflow.pause, Pause(by="carol", reason="checking dashboards"))
        assert "already paused" in await refused(h, EvacuationWorkflow.pause, Pause(by="carol"))
        held = await wait_for(h, lambda s: s.status == "paused")
        assert held.step == 1 and held.waiting_for == "resume (held before step 2/3)"
        assert (held.phase, [(x.reason, x.by, x.why) for x in held.holds]) == \
            ("shifting", [("paused", "carol", "checking dashboards")])  # the phase is kept, never guessed on resume
        assert await weights_of(registry, svc) == STEP_1  # nothing moves while paused
        await h.execute_update(EvacuationWorkflow.resume, Resume(by="carol"))
        result = await h.result()
    assert result.status == "evacuated" and result.weights_after == EVACUATED
    assert [(a.who, a.action) for a in result.audit if a.who == "carol"] == [("carol", "pause"), ("carol", "resume")]


async def test_abort_reverts_weights_and_replicas(env, task_queue, tmp_path):
    registry, fleet = simulated_registry(ttl=2)
    svc = service()
    async with running_worker(env.client, registry, task_queue, tmp_path):
        h = await start(env.client, evacuation(svc), task_queue)
        await wait_for(h, lambda s: s.step == 2)
        ack = await h.execute_update(EvacuationWorkflow.abort, AbortShift(by="dave", reason="wrong region"))
        assert "reverting" in ack.message
        assert "already stopping" in await refused(h, EvacuationWorkflow.abort, AbortShift(by="erin", reason="again"))
        result, message = await aborted(h)
    assert result.status == "aborted" and "aborted by dave: wrong region" in result.reason
    assert message == f"evacuate of eu-west-1 {result.reason}"
    assert result.weights_after == EVEN == await weights_of(registry, svc)
    assert result.replicas_after == result.replicas_before == {"us-east-1": 4, "eu-west-1": 4, "ap-south-1": 4}
    assert result.step == 0


async def test_abort_can_leave_traffic_where_it_is(env, task_queue, tmp_path):
    registry, _ = simulated_registry(ttl=2)
    svc = service()
    async with running_worker(env.client, registry, task_queue, tmp_path):
        h = await start(env.client, evacuation(svc), task_queue)
        await wait_for(h, lambda s: s.step == 1)
        await h.execute_update(EvacuationWorkflow.abort, AbortShift(by="dave", reason="hold here", revert=False))
        result, _ = await aborted(h)
    assert result.status == "aborted" and result.weights_after == STEP_1 and result.replicas_after["us-east-1"] == 8


async def test_request_cancellation_names_who_asked_and_leaves_traffic_where_it_is(env, task_queue, tmp_path):
    """The Web UI's Request Cancellation mid-way: aborted where it stands, and the reason and the audit name the
    identity the request carried, as a rollout's do (patch cancel-names-requester-everywhere)."""
    registry, _ = simulated_registry(ttl=2)
    svc = service()
    async with running_worker(env.client, registry, task_queue, tmp_path):
        h = await start(env.client, evacuation(svc), task_queue)
        await wait_for(h, lambda s: s.step == 1)
        await cancel_as_release_manager(env.client, h.id)
        result, message = await aborted(h)
        now = await weights_of(registry, svc)
    assert result.status == "aborted" and result.step >= 1
    assert result.reason.startswith(f"cancelled at step {result.step}: traffic left where it is (no revert); "
                                    "cancellation requested by rm@example.com"), result.reason
    assert ("rm@example.com", "cancel") in [(a.who, a.action) for a in result.audit]
    assert result.weights_after == now != EVEN and message == f"evacuate of eu-west-1 aborted: {result.reason}"


async def test_approval_gate_holds_before_anything_changes(env, task_queue, tmp_path):
    registry, fleet = simulated_registry()
    svc = service()
    async with running_worker(env.client, registry, task_queue, tmp_path):
        h = await start(env.client, evacuation(svc, require_approval=True, approvers=["alice"]), task_queue)
        state = await wait_for(h, lambda s: s.status == "awaiting_approval")
        assert state.planned[-1] == EVACUATED and state.weights_now == EVEN  # planned, nothing changed
        gate = next(x for x in state.holds if x.reason == "approval")
        assert gate.until is not None and state.waiting_for == (
            f"approve before anything changes; may decide: alice; times out at "
            f"{gate.until.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC, then it is aborted with nothing changed")
        assert not [c for c in fleet.calls if c[0] == "scale"]
        not_listed = await refused(h, EvacuationWorkflow.approve, ApproveShift(approver="mallory"))
        assert not_listed.endswith("approver: 'mallory' may not approve or decide here: the name is not on the list "
                                   "of approvers (the evacuation's approvers)")
        await h.execute_update(EvacuationWorkflow.approve, ApproveShift(approver="alice", comment="go"))
        result = await h.result()
    assert result.status == "evacuated"
    assert ("alice", "approve", "go") in [(a.who, a.action, a.detail) for a in result.audit]


@pytest.mark.parametrize("kwargs, setup, words", [
    ({"region": "mars-1"}, {}, "region: mars-1 has no traffic target"),
    ({}, {"weights": {"us-east-1": 0, "ap-south-1": 0}}, "eu-west-1 is the last region serving"),
    ({"receivers": ["us-east-1"]}, {"max_replicas": 6}, "us-east-1 needs 10 replicas (now 4)"),
    ({"receivers": ["atlantis-1"]}, {}, "receivers: unknown region atlantis-1"),
    ({"steps": [30, 30]}, {}, "steps: levels must strictly decrease"),  # as a UI start would send it
])
async def test_bad_requests_are_refused_before_anything_changes(env, task_queue, tmp_path, kwargs, setup, words):
    registry, fleet = simulated_registry(**setup)
    svc = service()
    before = await weights_of(registry, svc)
    async with running_worker(env.client, registry, task_queue, tmp_path):
        h = await start(env.client, evacuation(svc, **kwargs), task_queue)
        with pytest.raises(WorkflowFailureError) as err:
            await h.result()
        state = await h.query(EvacuationWorkflow.status)
    assert err.value.cause.type == "InvalidRequest" and words in str(err.value.cause), str(err.value.cause)
    assert "nothing was changed" in str(err.value.cause)
    assert state.status == "refused" and state.steps == []
    assert await weights_of(registry, svc) == before
    assert [c for c in fleet.calls if c[0] == "scale"] == []


async def test_a_60_second_ttl_is_waited_after_every_step(ts_env, task_queue, tmp_path):
    """On a time-skipping server: every health check comes at least one TTL after its step, in workflow time."""
    registry, _ = simulated_registry(ttl=60)
    svc = service()
    async with running_worker(ts_env.client, registry, task_queue, tmp_path):
        result = await (await start(ts_env.client, evacuation(svc, health_baseline_minutes=10, health_interval_seconds=5,
                                                              judge={"min_samples": 10}), task_queue)).result()
    assert result.status == "evacuated", result.reason
    assert result.wait_seconds == 60 and all(s.healthy for s in result.steps)
    for step, nxt in zip(result.steps, result.steps[1:]):
        assert (step.checked_at - step.applied_at).total_seconds() >= 60
        assert nxt.applied_at >= step.checked_at
    assert (result.ended_at - result.started_at).total_seconds() >= 180  # three TTLs of workflow time


async def test_a_plain_json_input_starts_it_as_the_web_ui_does(env, task_queue, tmp_path):
    """The UI's "Start workflow like this one" sends one json/plain object; a client without the pydantic converter does too."""
    from temporalio.client import Client

    raw = await Client.connect(env.client.service_client.config.target_host, namespace=env.client.namespace)
    registry, _ = simulated_registry()
    svc = service()
    payload = {"service": svc, "region": "eu-west-1", "requested_by": "ui-user", "reason": "from the UI", "steps": [50, 0],
               "health_baseline_minutes": 1, "health_interval_seconds": 1}
    async with running_worker(env.client, registry, task_queue, tmp_path):
        h = await raw.start_workflow("EvacuationWorkflow", payload, id=f"traffic/{svc}", task_queue=task_queue)
        result = await h.result()
    assert result["status"] == "evacuated" and result["weights_after"] == {"us-east-1": 150, "eu-west-1": 0, "ap-south-1": 150}
    assert result["audit"][0]["who"] == "ui-user" and result["steps_requested"] == [50, 0]


async def test_abort_while_awaiting_approval_changes_nothing(env, task_queue, tmp_path):
    registry, fleet = simulated_registry()
    svc = service()
    async with running_worker(env.client, registry, task_queue, tmp_path):
        h = await start(env.client, evacuation(svc, require_approval=True), task_queue)
        await wait_for(h, lambda s: s.status == "awaiting_approval")
        await h.execute_update(EvacuationWorkflow.abort, AbortShift(by="alice", reason="not now"))
        result, _ = await aborted(h)
    assert result.status == "aborted" and result.reason == "aborted by alice: not now; nothing was changed"
    assert result.weights_after == EVEN and not [c for c in fleet.calls if c[0] == "scale"]


async def test_an_unanswered_approval_times_out_without_changing_anything(ts_env, task_queue, tmp_path):
    registry, fleet = simulated_registry()
    svc = service()
    async with running_worker(ts_env.client, registry, task_queue, tmp_path):
        result, _ = await aborted(await start(ts_env.client, evacuation(svc, require_approval=True,
                                                                        approval_timeout_minutes=90), task_queue))
    assert result.status == "aborted" and "no approval within 90 min; nothing was changed" in result.reason
    assert result.weights_after == EVEN and not [c for c in fleet.calls if c[0] == "scale"]


async def test_each_step_waits_long_enough_for_the_judge_to_decide(ts_env, task_queue, tmp_path):
    """A 5 s TTL with 10 s samples and min_samples 10: the wait is 100 s, not 5 s, so a check never lacks data."""
    registry, _ = simulated_registry(ttl=5)
    svc = service()
    async with running_worker(ts_env.client, registry, task_queue, tmp_path):
        result = await (await start(ts_env.client, evacuation(svc, steps=[0], health_interval_seconds=10,
                                                              judge={"min_samples": 10}), task_queue)).result()
    assert result.status == "evacuated" and result.wait_seconds == 100
    # the page says why the wait is 100 s when the TTL is 5 s
    assert (result.ttl_seconds, result.settle_seconds) == (5, 5)
    assert "wait 100 s after each step (TTL 5 s; longer, so the health check has 10 samples 10 s apart)" \
        in evacuation_details(result)
    assert (result.steps[0].health_started_at - result.steps[0].applied_at).total_seconds() >= 100

