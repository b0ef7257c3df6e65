"""A `bifrost worker` process is SIGKILLed while an evacuation's activity is in flight — during the plan and during each
step's change — and a new worker takes over within 30 s; every step still lands once, in order.

Route 53 (moto behind the fault proxy) and the Kubernetes API (the fake) live in the test process, so they
outlive the workers, as the real ones do. The proxy holds back the answer to the request the kill lands on.
"""

from __future__ import annotations

import asyncio
import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.service import RPCError

from tests.integration.route53_faults import Fault
from tests.integration.test_evacuation_aws import EVEN
from tests.integration.test_route53_faults import faulty  # noqa: F401 - the fixture
from tests.worker_processes import WorkerProcesses
from tests.workflows.evacuation_helpers import evacuation, start
from workflows.evacuation.workflow import EvacuationWorkflow

pytestmark = pytest.mark.integration

SERVICE = "checkout"


def _workers(env, task_queue: str, tmp_path: Path, targets: dict[str, Any]) -> WorkerProcesses:
    """`bifrost worker` processes on the targets (written to a file) and a fleet drawn once per stage and version."""
    path = tmp_path / "targets.yaml"
    path.write_text(yaml.safe_dump(targets))
    fleet = tmp_path / "fleet.yaml"  # the default fleet, but a primary's samples drawn once per stage and version, so
    fleet.write_text("min_samples: 60\nfresh_draws: false\n")  # a health verdict is the same at any hour
    return WorkerProcesses(env.client, task_queue, tmp_path, "--targets", str(path), "--fleet", str(fleet),
                           "--fleet-db", str(tmp_path / "fleet.db"))


@pytest.mark.parametrize("kill_at", ["plan", "step 1", "step 2", "step 3"])
async def test_a_worker_killed_mid_evacuation_is_replaced_within_30_s(env, task_queue, tmp_path: Path, faulty,  # noqa: F811
                                                                       kill_at: str):
    f, proxy = faulty
    f.targets["aws"].update(timeout_seconds=5, max_attempts=1)
    if kill_at == "plan":
        proxy.inject(Fault("slow", delay=300, only_changes=False))  # the plan's first read
    else:
        proxy.inject(Fault("slow", delay=300, skip=int(kill_at.split()[1]) - 1))  # that step's change batch
    workers = _workers(env, task_queue, tmp_path, f.targets)

    # small steps without pre-warm: each worker process simulates load from what it saw itself, and a new one has
    # not seen the pre-warm; at these levels no receiver passes 70% of its capacity, so health stays quiet
    try:
        first = workers.start("worker-1")
        handle = await start(env.client, evacuation(SERVICE, health_baseline_minutes=1, steps=[90, 80, 70], prewarm=False), task_queue)
        deadline = time.monotonic() + 120
        while not proxy.holding.is_set():  # the kill lands while the worker waits for Route 53's answer
            assert first.poll() is None and time.monotonic() < deadline, f"no request held back\n{workers.tail()}"
            await asyncio.sleep(0.05)
        before = await handle.query(EvacuationWorkflow.status)
        first.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        assert first.wait(timeout=30) == -signal.SIGKILL
        workers.start("worker-2")

        async def moved_on() -> bool:
            # a query may fail while the server still routes it to the killed worker's sticky queue: not moved on yet
            try:
                state = await handle.query(EvacuationWorkflow.status, rpc_timeout=timedelta(seconds=5))
            except RPCError:
                return False
            return state.status != "planning" if kill_at == "plan" else state.step > before.step

        while not await moved_on():
            assert time.monotonic() - killed_at < 60, f"stalled after the kill at {kill_at}\n{workers.tail()}"
            await asyncio.sleep(0.2)
        failover = time.monotonic() - killed_at
        result = await asyncio.wait_for(handle.result(), timeout=180)
    finally:
        workers.stop()
    assert failover <= 30, f"the evacuation went on {failover:.1f} s after the kill at {kill_at}"
    assert result.status == "evacuated", result.reason
    assert proxy.applied == result.planned  # one landed change per step, in order
    assert f.weights() == result.weights_after == result.planned[-1]
    print(f"kill at {kill_at}: failover {failover:.1f} s")


async def test_a_worker_killed_between_the_hpa_raise_and_its_put_back_still_puts_back_the_original(
        env, task_queue, tmp_path: Path, faulty):  # noqa: F811
    """The pre-warm has raised the receivers' HPA floors and waits for their replicas when its worker dies; the
    new worker's retry finds the raised floors, yet the restore puts back the floors read before the raise."""
    f, _ = faulty
    receivers = ("us-east-1", "ap-south-1")
    for r in receivers:
        f.kube.seed_hpa(f"shop-{r}", "web", SERVICE, min_replicas=2, max_replicas=20)
        f.kube.stuck.add((f"shop-{r}", SERVICE))  # the raise lands; the replicas it asks for are not ready yet
    workers = _workers(env, task_queue, tmp_path, f.targets)

    def floors() -> dict[str, int]:
        return {r: f.kube.get_hpa(f"shop-{r}", "web")["spec"]["minReplicas"] for r in receivers}

    try:
        first = workers.start("worker-1")
        handle = await start(env.client, evacuation(SERVICE, health_baseline_minutes=1, steps=[90, 80, 70]), task_queue)
        deadline = time.monotonic() + 120
        while min(floors().values()) <= 2:  # both floors raised, the pre-warm waits for their replicas
            assert first.poll() is None and time.monotonic() < deadline, f"no floor raised\n{workers.tail()}"
            await asyncio.sleep(0.05)
        raised = floors()
        first.send_signal(signal.SIGKILL)
        assert first.wait(timeout=30) == -signal.SIGKILL
        for r in receivers:
            f.kube.stuck.discard((f"shop-{r}", SERVICE))
        workers.start("worker-2")
        result = await asyncio.wait_for(handle.result(), timeout=180)
        assert result.status == "evacuated", f"{result.reason}\n{workers.tail()}"
        assert result.min_replicas_before == {r: 2 for r in receivers} and result.raised == raised
        assert floors() == raised
        restore = await start(env.client, result.restore_input(requested_by="bob"), task_queue)
        restored = await asyncio.wait_for(restore.result(), timeout=180)
    finally:
        workers.stop()
    assert restored.status == "restored", restored.reason
    assert floors() == {r: 2 for r in receivers} and f.weights() == EVEN


async def test_a_worker_killed_between_a_restores_raise_and_its_put_back_still_converges(
        env, task_queue, tmp_path: Path, faulty):  # noqa: F811
    """Every region scaled by an HPA. The restore raises the restored region's floor to what it ran at home (4; its HPA
    scaled it down to 2 while drained) and waits for its replicas when its worker dies: the new worker finishes the
    restore, and every floor is back at the original 2, eu-west-1's included, with the weights home."""
    f, _ = faulty
    regions = ("us-east-1", "eu-west-1", "ap-south-1")
    for r in regions:
        f.kube.seed_hpa(f"shop-{r}", "web", SERVICE, min_replicas=2, max_replicas=20)
    eu = ("shop-eu-west-1", SERVICE)
    workers = _workers(env, task_queue, tmp_path, f.targets)

    def floors() -> dict[str, int]:
        return {r: f.kube.get_hpa(f"shop-{r}", "web")["spec"]["minReplicas"] for r in regions}

    try:
        first = workers.start("worker-1")
        # small steps: a new worker process has not seen the pre-warm (see the test above)
        evacuated = await asyncio.wait_for((await start(env.client, evacuation(
            SERVICE, health_baseline_minutes=1, steps=[90, 80, 70]), task_queue)).result(), timeout=180)
        assert evacuated.status == "evacuated", f"{evacuated.reason}\n{workers.tail()}"
        f.kube.set_load("shop-eu-west-1", "web", 1)  # less traffic: its HPA scales it down to its floor
        deadline = time.monotonic() + 30
        while f.kube.get("shop-eu-west-1", SERVICE)["spec"]["replicas"] != 2:
            assert time.monotonic() < deadline, "eu-west-1's HPA did not scale down"
            await asyncio.sleep(0.05)
        f.kube.stuck.add(eu)  # the raise lands; the replicas it asks for are not ready yet
        handle = await start(env.client, evacuated.restore_input(requested_by="bob"), task_queue)
        deadline = time.monotonic() + 120
        while floors()["eu-west-1"] <= 2:
            assert first.poll() is None and time.monotonic() < deadline, f"eu-west-1's floor not raised\n{workers.tail()}"
            await asyncio.sleep(0.05)
        raised = floors()["eu-west-1"]
        first.send_signal(signal.SIGKILL)
        assert first.wait(timeout=30) == -signal.SIGKILL
        f.kube.stuck.discard(eu)
        workers.start("worker-2")
        restored = await asyncio.wait_for(handle.result(), timeout=180)
    finally:
        workers.stop()
    assert raised == 4  # what it ran at home, from the evacuation's record
    assert restored.status == "restored", f"{restored.reason}\n{workers.tail()}"
    assert restored.min_replicas_before["eu-west-1"] == 2 and restored.raised == {}
    assert floors() == dict.fromkeys(regions, 2) and f.weights() == EVEN
