"""Pre-warm where a HorizontalPodAutoscaler scales the receivers: the evacuation raises each HPA's minReplicas (a
replicas patch would be undone by the fake's autoscaler, as by a real one) and puts back the floor it read before
any change: on restore, on abort, on a failure before traffic moved, and after an activity retry in between.

Route 53 through moto in server mode, the fake Kubernetes API with its autoscaler, the Temporal dev server.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import CancelledError

from bifrost_cli.traffic import traffic_outcome, weights_lines
from tests.integration.test_evacuation_aws import EVEN, SERVICE, Fleet, fleet  # noqa: F401 - the fixture
from tests.workflows.evacuation_helpers import evacuation, running_worker, start, wait_for
from workflows.evacuation.models import AbortShift, EvacuationState
from workflows.evacuation.workflow import EvacuationWorkflow

pytestmark = pytest.mark.integration

RECEIVERS = ("us-east-1", "ap-south-1")
FLOOR = 2  # each receiver's minReplicas before the evacuation; the load asks for the 4 replicas they run


def with_hpas(f: Fleet) -> Fleet:
    for r in RECEIVERS:
        f.kube.seed_hpa(f"shop-{r}", f"{SERVICE}-hpa", SERVICE, min_replicas=FLOOR, max_replicas=20)
    return f


def floors(f: Fleet) -> dict[str, int]:
    return {r: f.kube.get_hpa(f"shop-{r}", f"{SERVICE}-hpa")["spec"]["minReplicas"] for r in RECEIVERS}



async def aborted_state(handle) -> EvacuationState:  # type: ignore[no-untyped-def]
    """An aborted evacuation started by hand ends Canceled (patch aborted-ends-canceled); its state is the memo."""
    with pytest.raises(WorkflowFailureError) as err:
        await handle.result()
    assert isinstance(err.value.cause, CancelledError), err.value.cause
    state, _ = await traffic_outcome(handle)
    assert state is not None
    return state

async def until(pred, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def test_pre_warm_raises_the_hpa_floor_keeps_it_during_the_move_and_the_restore_puts_it_back(
        env, task_queue, tmp_path: Path, fleet: Fleet):  # noqa: F811
    with_hpas(fleet)
    during: dict[int, tuple[dict[str, int], dict[str, int]]] = {}
    async with running_worker(env.client, fleet.registry(), task_queue, tmp_path):
        h = await start(env.client, evacuation(SERVICE), task_queue)

        def record_step(state) -> bool:  # the replicas and floors while each step is in force
            if state.step and state.step not in during and state.status == "shifting":
                during[state.step] = (fleet.replicas(), floors(fleet))
            return state.status not in ("planning", "pre_warming", "shifting", "paused")

        await wait_for(h, record_step, timeout=90)
        result = await h.result()
        assert result.status == "evacuated", result.reason
        assert sorted(during) == [1, 2, 3]
        for replicas, floor in during.values():  # ceil(4 x 1.5 x 1.2) = 8, held by the HPA's floor
            assert {r: replicas[r] for r in RECEIVERS} == {r: 8 for r in RECEIVERS} and floor == {r: 8 for r in RECEIVERS}
        assert result.autoscalers == {r: f"{SERVICE}-hpa" for r in RECEIVERS}
        assert result.min_replicas_before == {r: FLOOR for r in RECEIVERS} and result.raised == {r: 8 for r in RECEIVERS}
        assert fleet.kube.count("PATCH", "/deployments/") == 0  # the replicas are the HPA's to set
        assert any("HPA checkout-hpa minReplicas 2 → 8" in a.detail for a in result.audit)
        assert result.min_replicas_now == {r: 8 for r in RECEIVERS}
        shown = "\n".join(weights_lines(result))
        assert all("HPA checkout-hpa minReplicas 2 -> 8" in line for line in shown.splitlines() if "us-east-1" in line
                   or "ap-south-1" in line), shown

        restore = result.restore_input(requested_by="bob")
        assert restore.restore_to is not None and restore.restore_to.min_replicas == {r: FLOOR for r in RECEIVERS}
        restored = await (await start(env.client, restore, task_queue)).result()
    assert restored.status == "restored", restored.reason
    assert fleet.weights() == EVEN and floors(fleet) == {r: FLOOR for r in RECEIVERS}
    assert restored.min_replicas_now == {r: FLOOR for r in RECEIVERS} and restored.raised == {}
    await until(lambda: fleet.replicas() == {r: 4 for r in ("us-east-1", "eu-west-1", "ap-south-1")})  # the load's


async def test_an_abort_with_revert_puts_the_floor_back(env, task_queue, tmp_path: Path, fleet: Fleet):  # noqa: F811
    with_hpas(fleet)
    async with running_worker(env.client, fleet.registry(), task_queue, tmp_path):
        h = await start(env.client, evacuation(SERVICE), task_queue)
        await wait_for(h, lambda s: s.step == 1 and s.status == "shifting", timeout=60)
        assert floors(fleet) == {r: 8 for r in RECEIVERS}
        await h.execute_update(EvacuationWorkflow.abort, AbortShift(by="alice", reason="wrong region"))
        result = await aborted_state(h)
    assert result.status == "aborted" and "put back as they were" in result.reason, result.reason
    assert fleet.weights() == EVEN and floors(fleet) == {r: FLOOR for r in RECEIVERS} and result.raised == {}


async def test_a_pre_warm_that_fails_puts_back_the_floors_it_raised(env, task_queue, tmp_path: Path, fleet: Fleet):  # noqa: F811
    with_hpas(fleet)
    fleet.kube.stuck.add(("shop-ap-south-1", SERVICE))  # its new replicas never become ready
    fleet.targets["targets"][2]["deployer"]["progress_deadline_seconds"] = 1
    async with running_worker(env.client, fleet.registry(), task_queue, tmp_path):
        h = await start(env.client, evacuation(SERVICE), task_queue)
        await until(lambda: floors(fleet) == {r: 8 for r in RECEIVERS})  # both raised, ap-south-1 never ready
        with pytest.raises(WorkflowFailureError) as err:
            await asyncio.wait_for(h.result(), timeout=120)
    assert "pre-warm failed" in err.value.cause.message and "HPA floors are back" in err.value.cause.message, err.value.cause.message
    assert fleet.weights() == EVEN and floors(fleet) == {r: FLOOR for r in RECEIVERS}
    assert fleet.recorder.batches == []


async def test_an_activity_retry_between_raise_and_restore_still_puts_back_the_original(
        env, task_queue, tmp_path: Path, fleet: Fleet):  # noqa: F811
    """The pre-warm raised the floor, then its activity failed and was retried: the retry finds the raised floor,
    which must not be taken for the original."""
    with_hpas(fleet)
    us = ("shop-us-east-1", SERVICE)
    fleet.kube.stuck.add(us)
    async with running_worker(env.client, fleet.registry(), task_queue, tmp_path):
        h = await start(env.client, evacuation(SERVICE), task_queue)
        await until(lambda: floors(fleet)["us-east-1"] == 8)
        fleet.kube.fail_next(5, 500, method="GET", path_contains="/namespaces/shop-us-east-1/deployments/")  # the wait fails
        await until(lambda: fleet.kube.faults == [] or all(f.remaining == 0 for f in fleet.kube.faults))
        fleet.kube.stuck.discard(us)
        result = await h.result()
        assert result.status == "evacuated", result.reason
        attempts = [e for e in (await h.fetch_history()).events if e.HasField("activity_task_started_event_attributes")
                    and e.activity_task_started_event_attributes.attempt > 1]
        assert attempts, "the pre-warm was not retried"
        assert result.min_replicas_before == {r: FLOOR for r in RECEIVERS}
        restored = await (await start(env.client, result.restore_input(requested_by="bob"), task_queue)).result()
    assert restored.status == "restored", restored.reason
    assert floors(fleet) == {r: FLOOR for r in RECEIVERS}


async def test_a_receiver_whose_hpa_cannot_reach_the_pre_warm_is_refused(env, task_queue, tmp_path: Path, fleet: Fleet):  # noqa: F811
    fleet.kube.seed_hpa("shop-us-east-1", "small", SERVICE, min_replicas=FLOOR, max_replicas=6)
    async with running_worker(env.client, fleet.registry(), task_queue, tmp_path):
        h = await start(env.client, evacuation(SERVICE), task_queue)
        with pytest.raises(WorkflowFailureError) as err:
            await h.result()
    cause = err.value.cause
    assert cause.type == "InvalidRequest" and "us-east-1 needs 8 replicas (now 4), but its HPA small allows at most 6" \
        in cause.message, cause.message
    assert fleet.recorder.batches == [] and fleet.kube.count("PATCH") == 0


async def test_without_pre_warm_the_plan_does_not_need_the_hpa_grant(fleet: Fleet):  # noqa: F811
    """`--no-prewarm` scales nothing, so a worker without RBAC for HPAs can still move traffic; with pre-warm the
    plan refuses, naming the grant, before anything changes."""
    from temporalio.exceptions import ApplicationError
    from temporalio.testing import ActivityEnvironment

    from activities.traffic.shift import TrafficActivities
    from common.traffic.models import PlanInput

    with_hpas(fleet)
    acts = TrafficActivities(fleet.registry())
    fleet.kube.fail_next(10, 403, method="GET", path_contains="horizontalpodautoscalers")
    plan = await ActivityEnvironment().run(acts.plan_traffic, PlanInput(service=SERVICE, region="eu-west-1", steps=[50, 0],
                                                                        prewarm=False))
    assert all(r.autoscaler is None and r.prewarm_to is None for r in plan.regions)
    with pytest.raises(ApplicationError) as err:
        await ActivityEnvironment().run(acts.plan_traffic, PlanInput(service=SERVICE, region="eu-west-1", steps=[50, 0]))
    assert err.value.type == "InvalidRequest" and "grant list on horizontalpodautoscalers" in err.value.message
    assert fleet.kube.count("PATCH") == 0 and fleet.recorder.batches == []


async def test_an_aborted_restore_leaves_the_evacuations_floors_with_the_traffic_it_puts_back_out(
        env, task_queue, tmp_path: Path, fleet: Fleet):  # noqa: F811
    with_hpas(fleet)
    eu = "shop-eu-west-1"
    fleet.kube.seed_hpa(eu, "eu", SERVICE, min_replicas=1, max_replicas=20)
    async with running_worker(env.client, fleet.registry(), task_queue, tmp_path):
        evacuated = await (await start(env.client, evacuation(SERVICE), task_queue)).result()
        assert evacuated.status == "evacuated", evacuated.reason
        fleet.kube.set_load(eu, "eu", 1)  # drained, its HPA scales it down to its floor
        await until(lambda: fleet.replicas()["eu-west-1"] == 1)
        h = await start(env.client, evacuated.restore_input(requested_by="bob"), task_queue)
        await wait_for(h, lambda s: s.step == 1 and s.status == "shifting", timeout=60)
        await h.execute_update(EvacuationWorkflow.abort, AbortShift(by="bob", reason="not yet"))
        aborted = await aborted_state(h)
    assert aborted.status == "aborted", aborted.reason
    assert fleet.weights() == evacuated.weights_after  # the traffic is back out of eu-west-1...
    assert floors(fleet) == {r: 8 for r in RECEIVERS}  # ...so the receivers keep the floors that carry it
    # the restore's own pre-warm of eu-west-1 (its floor raised from 1) was put back
    assert aborted.raised == {} and aborted.min_replicas_before["eu-west-1"] == 1
    assert fleet.kube.get_hpa(eu, "eu")["spec"]["minReplicas"] == 1
    restore = evacuated.restore_input(requested_by="bob")  # and a later restore still knows the originals
    assert restore.restore_to is not None and restore.restore_to.min_replicas == {r: FLOOR for r in RECEIVERS}


async def test_three_guard_cycles_put_every_floor_back_and_size_the_restored_region_from_home(
        env, task_queue, tmp_path: Path, fleet: Fleet):  # noqa: F811
    """The region guard's cycle three times (evacuate, a probe at half the share, the rest), every region scaled by an
    HPA: each cycle ends with every floor and every region's replicas as they started. The restore after the probe
    raises eu-west-1's floor to the 4 it ran at home, not to 4 x 2 x 1.2 from its probe share (the ratchet)."""
    from common.traffic.models import RestoreTarget
    from common.traffic.plan import probe_weights

    with_hpas(fleet)
    eu = "shop-eu-west-1"
    fleet.kube.seed_hpa(eu, f"{SERVICE}-hpa", SERVICE, min_replicas=FLOOR, max_replicas=20)
    regions = ("us-east-1", "eu-west-1", "ap-south-1")

    def all_floors() -> dict[str, int]:
        return {r: fleet.kube.get_hpa(f"shop-{r}", f"{SERVICE}-hpa")["spec"]["minReplicas"] for r in regions}

    async with running_worker(env.client, fleet.registry(), task_queue, tmp_path):
        for cycle in range(1, 4):
            evacuated = await (await start(env.client, evacuation(SERVICE), task_queue)).result()
            assert evacuated.status == "evacuated", f"cycle {cycle}: {evacuated.reason}"
            assert evacuated.min_replicas_before == dict.fromkeys(regions, FLOOR), f"cycle {cycle}"  # nothing left raised
            fleet.kube.set_load(eu, f"{SERVICE}-hpa", 1)  # drained: its HPA scales it down to its floor
            await until(lambda: fleet.replicas()["eu-west-1"] == FLOOR)
            back = evacuated.restore_input(requested_by="region-guard")
            assert back.restore_to is not None
            probe = back.model_copy(update={"steps": [0], "restore_to": RestoreTarget(
                weights=probe_weights(back.restore_to.weights, "eu-west-1", 50))})  # as the guard starts it
            probed = await (await start(env.client, probe, task_queue)).result()
            assert probed.status == "restored", f"cycle {cycle}: {probed.reason}"
            restored = await (await start(env.client, back, task_queue)).result()
            assert restored.status == "restored", f"cycle {cycle}: {restored.reason}"
            raised = [a.detail for a in restored.audit if a.action == "pre-warm" and a.detail.startswith("eu-west-1:")]
            assert raised == [f"eu-west-1: {FLOOR} → 4 replicas; HPA {SERVICE}-hpa minReplicas {FLOOR} → 4"], raised
            assert fleet.weights() == EVEN and all_floors() == dict.fromkeys(regions, FLOOR), f"cycle {cycle}"
            assert restored.raised == {}
            fleet.kube.set_load(eu, f"{SERVICE}-hpa", 4)  # its traffic is back, and with it the load
            await until(lambda: fleet.replicas() == dict.fromkeys(regions, 4))
