"""HorizontalPodAutoscalers (autoscaling/v2) through the official client against the fake API server: the fake's
autoscaler undoes a plain replicas patch as a real one does, and the deployer finds an HPA and moves its floor."""

from __future__ import annotations

import asyncio
import time

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from activities.adapters.base import Autoscaler, DeployError, autoscaling
from activities.adapters.kubernetes.deployer import kube_api_client
from common.types import StageRef
from tests.fakes.kube_api import FakeKubeApi
from tests.integration.test_kubernetes_deployer import NS, OLD, deployer, rolled_out

pytestmark = pytest.mark.integration

STAGE = StageRef(service="checkout", region="us-east-1", environment="prod")


async def _until(pred, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def hpa_api(kube: FakeKubeApi) -> k8s.AutoscalingV2Api:
    return k8s.AutoscalingV2Api(kube_api_client(api_url=kube.url))


async def test_the_fakes_autoscaler_undoes_a_plain_replicas_patch(kube: FakeKubeApi):
    """What makes the pre-warm tests honest: scaling the Deployment of an HPA does not last."""
    kube.seed_primary(NS, "checkout", OLD, replicas=4)
    kube.seed_hpa(NS, "checkout", "checkout", min_replicas=2, max_replicas=20)
    await deployer(kube).scale(STAGE, 8)  # the old pre-warm: patch spec.replicas
    await _until(lambda: kube.get(NS, "checkout")["spec"]["replicas"] == 4)
    kube.set_load(NS, "checkout", 30)  # far above maxReplicas: bounded by it
    await _until(lambda: kube.get(NS, "checkout")["spec"]["replicas"] == 20)
    kube.set_load(NS, "checkout", 0)
    await _until(lambda: kube.get(NS, "checkout")["spec"]["replicas"] == 2)  # never below minReplicas
    assert kube.get_hpa(NS, "checkout")["status"]["desiredReplicas"] == 2


async def test_the_fake_serves_hpas_like_an_api_server(kube: FakeKubeApi):
    kube.seed_primary(NS, "checkout", OLD, replicas=4)
    kube.seed_hpa(NS, "checkout-hpa", "checkout", min_replicas=2, max_replicas=10)
    api = hpa_api(kube)
    listed = await asyncio.to_thread(api.list_namespaced_horizontal_pod_autoscaler, NS)
    assert [h.metadata.name for h in listed.items] == ["checkout-hpa"]
    hpa = await asyncio.to_thread(api.read_namespaced_horizontal_pod_autoscaler, "checkout-hpa", NS)
    assert (hpa.spec.scale_target_ref.name, hpa.spec.min_replicas, hpa.spec.max_replicas) == ("checkout", 2, 10)
    stale = hpa.metadata.resource_version
    patched = await asyncio.to_thread(api.patch_namespaced_horizontal_pod_autoscaler, "checkout-hpa", NS,
                                      {"metadata": {"resourceVersion": stale}, "spec": {"minReplicas": 3}})
    assert patched.spec.min_replicas == 3 and patched.metadata.resource_version != stale
    hpa.spec.min_replicas = 5  # a replace carrying the stale resourceVersion loses the race
    with pytest.raises(ApiException) as err:
        await asyncio.to_thread(api.replace_namespaced_horizontal_pod_autoscaler, "checkout-hpa", NS, hpa)
    assert err.value.status == 409
    hpa.metadata.resource_version = patched.metadata.resource_version
    replaced = await asyncio.to_thread(api.replace_namespaced_horizontal_pod_autoscaler, "checkout-hpa", NS, hpa)
    assert replaced.spec.min_replicas == 5
    with pytest.raises(ApiException) as err:
        await asyncio.to_thread(api.patch_namespaced_horizontal_pod_autoscaler, "checkout-hpa", NS,
                                {"spec": {"minReplicas": 11}})
    assert err.value.status == 422 and "must be greater than or equal to `minReplicas`" in err.value.body
    with pytest.raises(ApiException) as err:
        await asyncio.to_thread(api.read_namespaced_horizontal_pod_autoscaler, "nope", NS)
    assert err.value.status == 404


async def test_the_deployer_finds_the_hpa_that_targets_its_primary(kube: FakeKubeApi):
    kube.seed_primary(NS, "checkout", OLD, replicas=4)
    kube.seed_primary(NS, "other", OLD, replicas=1)
    d = deployer(kube)
    assert autoscaling(d) is d
    assert await d.autoscaler(STAGE) is None
    kube.seed_hpa(NS, "other", "other", min_replicas=1, max_replicas=3)  # scales another Deployment
    assert await d.autoscaler(STAGE) is None
    kube.seed_hpa(NS, "web", "checkout", min_replicas=2, max_replicas=12)
    assert await d.autoscaler(STAGE) == Autoscaler(name="web", min_replicas=2, max_replicas=12)
    kube.seed_hpa(NS, "web-2", "checkout", min_replicas=2, max_replicas=12)
    with pytest.raises(DeployError) as err:
        await d.autoscaler(STAGE)
    assert not err.value.retryable and "2 HPAs scale checkout" in str(err.value) and "web, web-2" in str(err.value)


async def test_raising_the_floor_waits_for_the_autoscaler_and_is_idempotent(kube: FakeKubeApi):
    kube.seed_primary(NS, "checkout", OLD, replicas=4)
    kube.seed_hpa(NS, "web", "checkout", min_replicas=2, max_replicas=12)
    d = deployer(kube)
    kube.fail_next(2, 409, method="PATCH", path_contains="horizontalpodautoscalers")  # another writer: re-read
    await d.set_min_replicas(STAGE, "web", 8, wait=True)
    obj = kube.get(NS, "checkout")
    assert obj["spec"]["replicas"] == 8 and rolled_out(obj) and obj["status"]["availableReplicas"] == 8
    assert kube.get_hpa(NS, "web")["spec"]["minReplicas"] == 8
    patches = kube.count("PATCH", "horizontalpodautoscalers")
    assert patches == 3
    await deployer(kube).set_min_replicas(STAGE, "web", 8, wait=True)  # a retry in another process writes nothing
    assert kube.count("PATCH", "horizontalpodautoscalers") == patches
    assert kube.count("PATCH", "/deployments") == 0  # the replicas are the autoscaler's, never patched
    await d.set_min_replicas(STAGE, "web", 2, wait=False)
    assert kube.get_hpa(NS, "web")["spec"]["minReplicas"] == 2
    await _until(lambda: kube.get(NS, "checkout")["spec"]["replicas"] == 4)  # back to what the load asks


async def test_a_floor_above_max_replicas_or_a_missing_hpa_is_refused(kube: FakeKubeApi):
    kube.seed_primary(NS, "checkout", OLD, replicas=4)
    kube.seed_hpa(NS, "web", "checkout", min_replicas=2, max_replicas=6)
    d = deployer(kube)
    for name, n, words in (("web", 7, "above its maxReplicas 6"), ("gone", 3, "not found")):
        with pytest.raises(DeployError) as err:
            await d.set_min_replicas(STAGE, name, n, wait=True)
        assert not err.value.retryable and words in str(err.value), str(err.value)
    assert kube.get_hpa(NS, "web")["spec"]["minReplicas"] == 2


async def test_a_missing_rbac_grant_names_the_resource(kube: FakeKubeApi):
    kube.seed_primary(NS, "checkout", OLD, replicas=4)
    kube.fail_next(1, 403, method="GET", path_contains="horizontalpodautoscalers")
    with pytest.raises(DeployError) as err:
        await deployer(kube).autoscaler(STAGE)
    assert not err.value.retryable and f"grant list on horizontalpodautoscalers in namespace {NS}" in str(err.value)
