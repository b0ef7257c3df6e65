"""The Kubernetes deployer, driven through the official client against the fake apps/v1 API server."""

from __future__ import annotations

import json
import logging
import socket

import pytest
from kubernetes.client.exceptions import ApiException
from temporalio.testing import ActivityEnvironment

from activities.adapters.base import DeployError
from activities.adapters.kubernetes.deployer import (
    KubeRequest,
    KubernetesDeployer,
    KubeSettings,
    kube_api_client,
    kube_status_error,
)
from activities.adapters.kubernetes.manifests import PREVIOUS_TEMPLATE_ANNOTATION, ROLE_LABEL, VERSION_ANNOTATION, VERSION_LABEL
from common.types import StageRef
from tests.fakes.kube_api import FakeKubeApi
from tests.integration.conftest import assert_one_line

pytestmark = pytest.mark.integration

NS = "shop"
OLD, NEW = "registry.example.com/checkout:1.0.0", "registry.example.com/checkout:1.1.0"
STAGE = StageRef(service="checkout", region="us-east-1", environment="prod")


def deployer(kube: FakeKubeApi, **overrides: object) -> KubernetesDeployer:
    settings = dict(namespace=NS, poll_seconds=0.02, progress_deadline_seconds=5, backoff_seconds=0.01,
                    image_pull_grace_seconds=0.2)
    settings.update(overrides)
    return KubernetesDeployer(lambda: kube_api_client(api_url=kube.url), KubeSettings(**settings))  # type: ignore[arg-type]


def writes(kube: FakeKubeApi) -> int:
    return sum(kube.count(m) for m in ("POST", "PUT", "PATCH", "DELETE"))


def rolled_out(obj: dict) -> bool:
    st, spec = obj["status"], obj["spec"]
    return (st.get("observedGeneration") == obj["metadata"]["generation"]
            and st.get("updatedReplicas") == st.get("availableReplicas") == st.get("replicas") == spec["replicas"])


async def test_canary_and_baseline_run_beside_the_primary(kube: FakeKubeApi):
    kube.seed_primary(NS, "checkout", OLD, replicas=3)
    d = deployer(kube)
    assert await d.current_version(STAGE) == "1.0.0"  # from the image tag: Bifrost has not touched it yet

    await d.deploy(STAGE, "canary", "1.1.0", NEW, 2)
    await d.deploy(STAGE, "baseline", "1.0.0", None, 1)

    canary, baseline = kube.get(NS, "checkout-canary"), kube.get(NS, "checkout-baseline")
    assert canary["spec"]["replicas"] == 2 and baseline["spec"]["replicas"] == 1
    assert kube.image_of(NS, "checkout-canary") == NEW
    assert kube.image_of(NS, "checkout-baseline") == OLD  # copied from the primary
    for obj, role, version in ((canary, "canary", "1.1.0"), (baseline, "baseline", "1.0.0")):
        assert rolled_out(obj), obj["status"]  # deploy() returned only after the rollout completed
        assert obj["metadata"]["labels"][ROLE_LABEL] == role
        assert obj["metadata"]["annotations"][VERSION_ANNOTATION] == version
        assert obj["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "checkout", ROLE_LABEL: role}
        pod_labels = obj["spec"]["template"]["metadata"]["labels"]
        assert pod_labels["app.kubernetes.io/name"] == "checkout"  # still matched by the primary's Service
        assert (pod_labels[ROLE_LABEL], pod_labels[VERSION_LABEL]) == (role, version)
    assert kube.image_of(NS, "checkout") == OLD and kube.get(NS, "checkout")["spec"]["replicas"] == 3


async def test_every_step_is_idempotent(kube: FakeKubeApi):
    kube.seed_primary(NS, "checkout", OLD)
    d = deployer(kube)
    await d.deploy(STAGE, "canary", "1.1.0", NEW, 1)
    before = writes(kube)
    await d.deploy(STAGE, "canary", "1.1.0", NEW, 1)  # a retried activity after a crash
    assert writes(kube) == before

    assert await d.promote(STAGE, "1.1.0", NEW) == "1.0.0"
    before = writes(kube)
    assert await deployer(kube).promote(STAGE, "1.1.0", NEW) == "1.0.0"  # new process, same answer, no write
    assert writes(kube) == before
    assert await d.current_version(STAGE) == "1.1.0"

    await d.cleanup(STAGE)
    await d.cleanup(STAGE)
    assert kube.get(NS, "checkout-canary") is None and kube.get(NS, "checkout-baseline") is None


async def test_promote_patches_the_image_and_rollback_restores_the_previous_template(kube: FakeKubeApi):
    original = kube.seed_primary(NS, "checkout", OLD, replicas=2)["spec"]["template"]
    d = deployer(kube)
    assert await d.promote(STAGE, "1.1.0", NEW) == "1.0.0"

    patches = [r for r in kube.requests if r.method == "PATCH"]
    assert [p.content_type for p in patches] == ["application/strategic-merge-patch+json"]
    primary = kube.get(NS, "checkout")
    assert kube.image_of(NS, "checkout") == NEW and rolled_out(primary)
    assert primary["spec"]["template"]["spec"]["containers"][0]["ports"] == [{"containerPort": 8080}]  # merged by name
    assert primary["metadata"]["annotations"][VERSION_ANNOTATION] == "1.1.0"
    assert PREVIOUS_TEMPLATE_ANNOTATION in primary["metadata"]["annotations"]

    # A fresh deployer (the worker restarted) rolls back from what the cluster itself recorded.
    await deployer(kube).rollback(STAGE, "1.0.0", None)
    restored = kube.get(NS, "checkout")
    assert restored["spec"]["template"] == original
    assert rolled_out(restored) and restored["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "3"
    assert await d.current_version(STAGE) == "1.0.0"
    before = writes(kube)
    await d.rollback(STAGE, "1.0.0", None)  # already there: no-op
    assert writes(kube) == before


async def test_rollback_without_saved_template_needs_an_image(kube: FakeKubeApi):
    kube.seed_primary(NS, "checkout", NEW, annotations={VERSION_ANNOTATION: "1.1.0"})
    d = deployer(kube)
    with pytest.raises(DeployError) as err:
        await d.rollback(STAGE, "1.0.0", None)
    assert not err.value.retryable and "no saved template" in str(err.value)
    await d.rollback(STAGE, "1.0.0", OLD)
    assert kube.image_of(NS, "checkout") == OLD and await d.current_version(STAGE) == "1.0.0"


async def test_conflicts_are_retried_by_rereading(kube: FakeKubeApi):
    kube.seed_primary(NS, "checkout", OLD)
    kube.fail_next(2, 409, method="PATCH")
    d = deployer(kube)
    assert await d.promote(STAGE, "1.1.0", NEW) == "1.0.0"
    assert kube.count("PATCH") == 3 and kube.image_of(NS, "checkout") == NEW


async def test_a_stale_resource_version_is_a_real_conflict(kube: FakeKubeApi):
    """The deployer's patch carries the resourceVersion it read; a writer in between makes the server answer 409."""
    kube.seed_primary(NS, "checkout", OLD)
    d = deployer(kube)
    real_read = d._read
    touched = []

    async def read_then_someone_writes(failed: str, ns: str, name: str):  # noqa: ANN202
        dep = await real_read(failed, ns, name)
        if name == "checkout" and not touched:
            kube.touch(ns, name)
            touched.append(True)
        return dep

    d._read = read_then_someone_writes  # type: ignore[method-assign]
    assert await d.promote(STAGE, "1.1.0", NEW) == "1.0.0"
    assert kube.count("PATCH") == 2  # the first patch got 409 Conflict from the resourceVersion check
    assert "other-writer/touched" in kube.get(NS, "checkout")["metadata"]["annotations"]  # their change survived


async def test_endless_conflicts_give_a_retryable_error(kube: FakeKubeApi):
    kube.seed_primary(NS, "checkout", OLD)
    kube.fail_next(100, 409, method="PATCH")
    with pytest.raises(DeployError) as err:
        await deployer(kube, max_attempts=3).promote(STAGE, "1.1.0", NEW)
    assert err.value.retryable and "conflicts" in str(err.value)


async def test_server_errors_are_retried_then_reported_retryable(kube: FakeKubeApi):
    kube.seed_primary(NS, "checkout", OLD)
    kube.fail_next(2, 503, method="GET", path_contains="/deployments/checkout")
    d = deployer(kube)
    assert await d.current_version(STAGE) == "1.0.0"
    kube.fail_next(50, 500)
    with pytest.raises(DeployError) as err:
        await deployer(kube, max_attempts=2).deploy(STAGE, "canary", "1.1.0", NEW, 1)
    assert err.value.retryable and "500 Internal Server Error" in str(err.value)


@pytest.mark.parametrize("status, words", [(403, "Forbidden"), (422, "Unprocessable"), (404, "Not Found")])
async def test_client_errors_are_not_retryable(kube: FakeKubeApi, status: int, words: str):
    kube.seed_primary(NS, "checkout", OLD)
    kube.fail_next(1, status, method="POST")
    with pytest.raises(DeployError) as err:
        await deployer(kube).deploy(STAGE, "canary", "1.1.0", NEW, 1)
    assert not err.value.retryable
    assert f"{status} {words}" in str(err.value) and "CREATE deployments/shop/checkout-canary" in str(err.value)
    assert kube.count("POST") == 1  # not retried


async def test_missing_primary_is_a_clear_permanent_error(kube: FakeKubeApi):
    d = deployer(kube)
    assert await d.current_version(STAGE) is None
    with pytest.raises(DeployError) as err:
        await d.deploy(STAGE, "canary", "1.1.0", NEW, 1)
    assert not err.value.retryable and "primary Deployment shop/checkout not found" in str(err.value)


async def test_unpullable_image_fails_the_deploy_as_bad_image(kube: FakeKubeApi):
    kube.seed_primary(NS, "checkout", OLD)
    kube.unpullable_images.add("registry.example.com/checkout:9.9.9")
    with pytest.raises(DeployError) as err:
        await deployer(kube).deploy(STAGE, "canary", "9.9.9", "registry.example.com/checkout:9.9.9", 1)
    assert not err.value.retryable and "ImagePullBackOff" in str(err.value)


async def test_invalid_image_reference_is_rejected_before_any_call(kube: FakeKubeApi):
    kube.seed_primary(NS, "checkout", OLD)
    with pytest.raises(DeployError) as err:
        await deployer(kube).deploy(STAGE, "canary", "1.1.0", "Registry/Checkout: 1.1", 1)
    assert not err.value.retryable and writes(kube) == 0


async def test_a_stuck_rollout_fails_on_the_progress_deadline(kube: FakeKubeApi):
    kube.seed_primary(NS, "checkout", OLD)
    kube.stuck.add((NS, "checkout-canary"))
    with pytest.raises(DeployError) as err:
        await deployer(kube, progress_deadline_seconds=1).deploy(STAGE, "canary", "1.1.0", NEW, 2)
    assert not err.value.retryable
    assert "ProgressDeadlineExceeded" in str(err.value) or "progress deadline" in str(err.value)


async def test_a_stuck_rollout_fails_on_the_servers_deadline_even_when_its_controller_sees_the_change_late():
    """The server counts the progress deadline from when its controller saw the change, which can lag our start (a
    loaded API server, or this fake's controller ticking late): our own deadline must still come after its
    ProgressDeadlineExceeded, the more telling failure. With a 0.5 s margin it did not (a flaky test under load)."""
    with FakeKubeApi(tick_seconds=0.8) as lagging:
        lagging.seed_primary(NS, "checkout", OLD)
        lagging.stuck.add((NS, "checkout-canary"))
        with pytest.raises(DeployError) as err:
            await deployer(lagging, progress_deadline_seconds=1).deploy(STAGE, "canary", "1.1.0", NEW, 2)
    assert not err.value.retryable
    assert "progress deadline exceeded" in str(err.value), err.value


async def test_waiting_heartbeats_inside_an_activity(kube: FakeKubeApi):
    kube.seed_primary(NS, "checkout", OLD)
    beats: list[tuple] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)
    await env.run(deployer(kube).deploy, STAGE, "canary", "1.1.0", NEW, 3)
    texts = [str(b[0]) for b in beats]
    assert any("replicas updated" in t or "available" in t for t in texts), texts
    assert any("3 of 3 replicas available" in t for t in texts), texts


async def test_changed_replicas_update_the_canary_in_place(kube: FakeKubeApi):
    kube.seed_primary(NS, "checkout", OLD)
    d = deployer(kube)
    await d.deploy(STAGE, "canary", "1.1.0", NEW, 1)
    uid = kube.get(NS, "checkout-canary")["metadata"]["uid"]
    await d.deploy(STAGE, "canary", "1.1.0", NEW, 3)
    canary = kube.get(NS, "checkout-canary")
    assert canary["metadata"]["uid"] == uid and canary["spec"]["replicas"] == 3 and rolled_out(canary)
    assert kube.count("PUT") == 1


async def test_bearer_token_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch):
    with FakeKubeApi(tick_seconds=0.02, token="s3cr3t-kube-token") as kube:
        kube.seed_primary(NS, "checkout", OLD)
        settings = KubeSettings(namespace=NS, poll_seconds=0.02)
        d = KubernetesDeployer(lambda: kube_api_client(api_url=kube.url, token_env="TEST_KUBE_TOKEN"), settings)
        monkeypatch.delenv("TEST_KUBE_TOKEN", raising=False)
        with pytest.raises(DeployError) as err:
            await d.current_version(STAGE)
        assert not err.value.retryable and "TEST_KUBE_TOKEN" in str(err.value)

        monkeypatch.setenv("TEST_KUBE_TOKEN", "wrong")
        with pytest.raises(DeployError) as err:
            await KubernetesDeployer(lambda: kube_api_client(api_url=kube.url, token_env="TEST_KUBE_TOKEN"),
                                     settings).current_version(STAGE)
        assert "401 Unauthorized" in str(err.value) and "wrong" not in str(err.value)

        monkeypatch.setenv("TEST_KUBE_TOKEN", "s3cr3t-kube-token")
        d = KubernetesDeployer(lambda: kube_api_client(api_url=kube.url, token_env="TEST_KUBE_TOKEN"), settings)
        assert await d.current_version(STAGE) == "1.0.0"
        assert kube.requests[-1].authorization == "Bearer s3cr3t-kube-token"


# -- one-line errors ---------------------------------------------------------------------------------

async def test_a_refused_canary_delete_still_removes_the_baseline(kube: FakeKubeApi):
    kube.seed_primary(NS, "checkout", OLD)
    d = deployer(kube, max_attempts=2)
    await d.deploy(STAGE, "canary", "1.1.0", NEW, 1)
    await d.deploy(STAGE, "baseline", "1.0.0", OLD, 1)
    kube.fail_next(100, 403, method="DELETE", path_contains="checkout-canary")
    with pytest.raises(DeployError) as err:
        await d.cleanup(STAGE)
    assert_one_line(str(err.value), "could not remove the canary in us-east-1/prod",
                    "403 Forbidden on DELETE deployments/shop/checkout-canary")
    assert "baseline" not in str(err.value)
    assert kube.get(NS, "checkout-canary") is not None and kube.get(NS, "checkout-baseline") is None


@pytest.mark.parametrize("method, status, call, parts", [
    ("DELETE", 403, "cleanup", ["could not remove the canary and the baseline in us-east-1/prod",
                                "403 Forbidden on DELETE deployments/shop/checkout-canary and DELETE deployments/shop/checkout-baseline",
                                "grant delete on deployments in namespace shop to the worker's service account"]),
    ("POST", 422, "deploy", ["could not deploy the canary 1.1.0 to us-east-1/prod",
                             "422 Unprocessable Entity on CREATE deployments/shop/checkout-canary", "rejected the object as invalid"]),
    ("PATCH", 403, "promote", ["could not promote 1.1.0 in us-east-1/prod", "403 Forbidden on PATCH deployments/shop/checkout",
                               "grant patch on deployments in namespace shop"]),
    ("PATCH", 404, "promote", ["404 Not Found on PATCH deployments/shop/checkout", "check namespace and workload in the targets file"]),
    ("GET", 401, "current_version", ["could not read the version running in us-east-1/prod",
                                     "401 Unauthorized on GET deployments/shop/checkout", "credentials"]),
    ("GET", 403, "current_version", ["403 Forbidden on GET deployments/shop/checkout", "grant get on deployments in namespace shop"]),
    ("PUT", 403, "rollback", ["could not roll us-east-1/prod back to 1.0.0", "403 Forbidden on UPDATE deployments/shop/checkout",
                              "grant update on deployments in namespace shop"]),
    ("PATCH", 409, "promote", ["409 Conflict on PATCH deployments/shop/checkout", "another controller or person is editing it"]),
    ("GET", 503, "current_version", ["503 Service Unavailable on GET deployments/shop/checkout", "still failing after 2 attempts",
                                     "the activity will be retried"]),
])
async def test_api_errors_are_one_line_naming_the_request_the_status_and_the_fix(
        kube: FakeKubeApi, method: str, status: int, call: str, parts: list[str]):
    kube.seed_primary(NS, "checkout", OLD)
    d = deployer(kube, max_attempts=2)
    if call == "rollback":
        await d.promote(STAGE, "1.1.0", NEW)  # so that the rollback replaces the primary with its saved template
    if call == "cleanup":
        await d.deploy(STAGE, "canary", "1.1.0", NEW, 1)
    kube.fail_next(100, status, method=method)
    with pytest.raises(DeployError) as err:
        if call == "cleanup":
            await d.cleanup(STAGE)
        elif call == "deploy":
            await d.deploy(STAGE, "canary", "1.1.0", NEW, 1)
        elif call == "promote":
            await d.promote(STAGE, "1.1.0", NEW)
        elif call == "rollback":
            await d.rollback(STAGE, "1.0.0", None)
        else:
            await d.current_version(STAGE)
    assert_one_line(str(err.value), *parts)
    assert err.value.retryable == (status in (409, 503))
    assert (err.value.status or "").startswith(str(status)) and err.value.hint and err.value.hint in str(err.value)


async def test_the_raw_client_text_stays_out_of_the_message(kube: FakeKubeApi):
    """What the client itself prints for a 403 carries the response headers; Bifrost's message quotes only the Status."""
    kube.seed_primary(NS, "checkout", OLD)
    kube.fail_next(1, 403, method="DELETE")
    with pytest.raises(DeployError) as err:
        await deployer(kube).cleanup(STAGE)
    raw = str(err.value.__cause__)
    assert "HTTP response headers" in raw and "HTTPHeaderDict" in raw  # the dump issue #13 complained about
    assert_one_line(str(err.value), "injected fault: HTTP 403 for DELETE")  # the Status body's message, quoted


def test_a_status_without_message_is_summarised_from_its_causes():
    err = ApiException(status=422, reason="Unprocessable Entity")
    err.body = json.dumps({"kind": "Status", "status": "Failure", "reason": "Invalid", "code": 422, "details": {
        "causes": [{"reason": "FieldValueInvalid", "field": "spec.replicas", "message": "must be greater than or equal to 0"},
                   {"reason": "FieldValueRequired", "field": "spec.template.spec.containers[0].image", "message": "Required value"}]}})
    msg = str(kube_status_error("could not deploy", KubeRequest("update", "deployments", "shop", "x"), err))
    assert_one_line(msg, "422 Unprocessable Entity on UPDATE deployments/shop/x",
                    "spec.replicas: must be greater than or equal to 0; spec.template.spec.containers[0].image: Required value")


async def test_an_unreachable_api_server_is_one_retryable_line():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    d = KubernetesDeployer(lambda: kube_api_client(api_url=f"http://127.0.0.1:{port}"),
                           KubeSettings(namespace=NS, max_attempts=2, backoff_seconds=0.01, request_timeout_seconds=2))
    with pytest.raises(DeployError) as err:
        await d.current_version(STAGE)
    assert err.value.retryable
    assert_one_line(str(err.value), "connection failed on GET deployments/shop/checkout", "Connection refused",
                    "cannot reach the Kubernetes API server (2 attempts)")


async def test_unreadable_pods_warn_once_in_one_line_and_the_deploy_still_completes(kube: FakeKubeApi, caplog):
    caplog.set_level(logging.WARNING, logger="activities.adapters.kubernetes.deployer")
    kube.seed_primary(NS, "checkout", OLD)
    kube.fail_next(1000, 403, method="GET", path_contains="/pods")
    await deployer(kube).deploy(STAGE, "canary", "1.1.0", NEW, 2)
    assert rolled_out(kube.get(NS, "checkout-canary"))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert_one_line(warnings[0], "cannot check image pulls", "403 Forbidden on LIST pods/shop",
                    "grant list on pods in namespace shop")
