"""Scaling a primary (the evacuation's pre-warm) through the official client against the fake apps/v1 API server."""

from __future__ import annotations

import pytest

from activities.adapters.base import DeployError
from common.types import StageRef
from tests.fakes.kube_api import FakeKubeApi
from tests.integration.test_kubernetes_deployer import NS, OLD, deployer, rolled_out, writes

pytestmark = pytest.mark.integration

STAGE = StageRef(service="checkout", region="us-east-1", environment="prod")


async def test_scale_up_waits_until_every_new_replica_is_available(kube: FakeKubeApi):
    kube.seed_primary(NS, "checkout", OLD, replicas=3)
    d = deployer(kube)
    assert await d.replicas(STAGE) == 3
    await d.scale(STAGE, 7)
    obj = kube.get(NS, "checkout")
    assert obj["spec"]["replicas"] == 7 and rolled_out(obj), obj["status"]  # returned only once all 7 were available
    assert obj["status"]["availableReplicas"] == 7
    assert kube.image_of(NS, "checkout") == OLD  # only the count changed, not the pod template
    assert await d.replicas(STAGE) == 7
    patches = [r for r in kube.requests if r.method == "PATCH"]
    assert len(patches) == 1 and patches[0].content_type == "application/strategic-merge-patch+json"


async def test_scale_is_idempotent_and_scales_down(kube: FakeKubeApi):
    kube.seed_primary(NS, "checkout", OLD, replicas=3)
    d = deployer(kube)
    await d.scale(STAGE, 5)
    before = writes(kube)
    await deployer(kube).scale(STAGE, 5)  # a retried activity, another process: nothing written
    assert writes(kube) == before
    await d.scale(STAGE, 2)
    obj = kube.get(NS, "checkout")
    assert obj["spec"]["replicas"] == 2 and rolled_out(obj) and obj["status"]["replicas"] == 2


async def test_a_conflicting_writer_is_re_read_and_the_scale_goes_through(kube: FakeKubeApi):
    kube.seed_primary(NS, "checkout", OLD, replicas=2)
    kube.fail_next(2, 409, method="PATCH")
    await deployer(kube).scale(STAGE, 4)
    assert kube.get(NS, "checkout")["spec"]["replicas"] == 4
    assert kube.count("PATCH") == 3


async def test_a_scale_that_never_becomes_ready_fails_with_what_to_inspect(kube: FakeKubeApi):
    kube.seed_primary(NS, "checkout", OLD, replicas=2, progress_deadline_seconds=1)
    kube.stuck.add((NS, "checkout"))
    with pytest.raises(DeployError) as err:
        await deployer(kube, progress_deadline_seconds=1).scale(STAGE, 6)
    assert not err.value.retryable and "progress deadline exceeded" in str(err.value)
    assert f"kubectl -n {NS} describe deployment checkout" in str(err.value)


async def test_a_missing_primary_cannot_be_scaled_or_read(kube: FakeKubeApi):
    d = deployer(kube)
    for call in (d.replicas(STAGE), d.scale(STAGE, 3)):
        with pytest.raises(DeployError) as err:
            await call
        assert not err.value.retryable and f"primary Deployment {NS}/checkout not found" in str(err.value)
    assert writes(kube) == 0
