"""The `gateway-api` canary router end to end: the official kubernetes client's CustomObjectsApi against the fake API
server's HTTPRoutes (resourceVersion preconditions, 409 on a stale write, 404, 403, validation)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from activities.adapters.base import TrafficError
from activities.adapters.routers.base import RouterConflict, TrafficRouter
from activities.adapters.routers.gateway_api import GatewayApiRouter, GatewayRouteSettings
from activities.adapters.routers.shares import percent
from common.traffic.arms import WITHDRAWN, ArmWeights
from common.types import StageRef
from tests.fakes.kube_api import FakeKubeApi
from tests.integration.conftest import assert_one_line

STAGE = StageRef(service="checkout", region="us-east-1", environment="prod")
NS = "shop"
STEP5 = ArmWeights.step(5)


@pytest.fixture
def kube() -> Iterator[FakeKubeApi]:
    """A fresh fake API server per test (the name `kube` marks the test `process`, tests/conftest.py)."""
    with FakeKubeApi(tick_seconds=0.02) as fake:
        yield fake


def refs(primary: int | None = 100, canary: int | None = 0, baseline: int | None = 0) -> list[dict[str, Any]]:
    """backendRefs for checkout / checkout-canary / checkout-baseline; None leaves the ref out."""
    out = []
    for name, w in (("checkout", primary), ("checkout-canary", canary), ("checkout-baseline", baseline)):
        if w is not None:
            out.append({"name": name, "port": 8080, "weight": w})
    return out


def router(kube: FakeKubeApi, **settings: Any) -> GatewayApiRouter:
    cfg = GatewayRouteSettings(**{"namespace": NS, "backoff_seconds": 0.01, **settings})
    return GatewayApiRouter(lambda: k8s.ApiClient(k8s.Configuration(host=kube.url)), cfg)


def weights_in(kube: FakeKubeApi, name: str = "checkout", rule: int = 0) -> dict[str, int]:
    route = kube.httproute(NS, name)
    assert route is not None
    return {r["name"]: r["weight"] for r in route["spec"]["rules"][rule]["backendRefs"]}


async def test_reads_steps_and_withdraws_through_the_real_client(kube):
    kube.seed_httproute(NS, "checkout", refs())
    r = router(kube)
    assert isinstance(r, TrafficRouter)
    assert await r.weights(STAGE) == WITHDRAWN
    assert await r.set_weights(STAGE, STEP5, expect=WITHDRAWN) == STEP5
    assert weights_in(kube) == {"checkout": 90, "checkout-canary": 5, "checkout-baseline": 5}
    step25 = ArmWeights.step(25)
    assert await r.set_weights(STAGE, step25, expect=STEP5) == step25
    assert await r.weights(STAGE) == step25
    assert await r.set_weights(STAGE, WITHDRAWN, expect=None) == WITHDRAWN
    assert weights_in(kube) == {"checkout": 100, "checkout-canary": 0, "checkout-baseline": 0}
    route = kube.httproute(NS, "checkout")
    assert route is not None and route["spec"]["parentRefs"] == [{"name": "gateway"}]  # the rest of the route kept
    assert route["spec"]["rules"][0]["matches"] == [{"path": {"type": "PathPrefix", "value": "/"}}]
    assert kube.count("PUT", "/httproutes/checkout") == 3


async def test_an_idempotent_retry_writes_nothing(kube):
    """A worker killed after its write landed retries the same step: it finds the weights in force and returns them."""
    kube.seed_httproute(NS, "checkout", refs())
    r = router(kube)
    await r.set_weights(STAGE, STEP5, expect=WITHDRAWN)
    rv = kube.httproute(NS, "checkout")["metadata"]["resourceVersion"]
    assert await r.set_weights(STAGE, STEP5, expect=WITHDRAWN) == STEP5
    assert await r.set_weights(STAGE, WITHDRAWN, expect=None) == WITHDRAWN
    assert await r.set_weights(STAGE, WITHDRAWN, expect=None) == WITHDRAWN
    assert kube.count("PUT", "/httproutes/checkout") == 2
    assert kube.httproute(NS, "checkout")["metadata"]["resourceVersion"] != rv


async def test_a_stale_expect_is_a_conflict_and_writes_nothing(kube):
    kube.seed_httproute(NS, "checkout", refs(80, 10, 10))
    r = router(kube)
    with pytest.raises(RouterConflict) as err:
        await r.set_weights(STAGE, ArmWeights.step(25), expect=STEP5)
    assert_one_line(str(err.value), "us-east-1/prod", "HTTPRoute shop/checkout", "expected primary 90%",
                    "found primary 80%")
    assert err.value.retryable is False
    assert weights_in(kube) == {"checkout": 80, "checkout-canary": 10, "checkout-baseline": 10}
    assert kube.count("PUT", "/httproutes/") == 0


async def test_a_writer_between_read_and_write_makes_it_a_conflict(kube):
    """Someone moves the weights after Bifrost read the route: its write carries the old resourceVersion, the API
    server answers 409, and after re-reading Bifrost reports the conflict instead of overwriting."""
    kube.seed_httproute(NS, "checkout", refs())
    r = router(kube)

    def someone_else(spec: dict[str, Any]) -> None:
        spec["rules"][0]["backendRefs"][1]["weight"] = 50
        spec["rules"][0]["backendRefs"][0]["weight"] = 50

    kube.before_next("PUT", "/httproutes/checkout", lambda: kube.edit_httproute(NS, "checkout", someone_else))
    with pytest.raises(RouterConflict) as err:
        await r.set_weights(STAGE, STEP5, expect=WITHDRAWN)
    assert "found primary 50% · canary 50% · baseline 0%" in str(err.value)
    assert weights_in(kube) == {"checkout": 50, "checkout-canary": 50, "checkout-baseline": 0}
    assert kube.count("PUT", "/httproutes/checkout") == 1  # the one the API server refused


async def test_a_writer_that_moves_no_weight_only_costs_a_retry(kube):
    """A 409 caused by an unrelated change (a label, another rule's matches) re-reads and writes again."""
    kube.seed_httproute(NS, "checkout", refs())
    r = router(kube)
    kube.before_next("PUT", "/httproutes/checkout", lambda: kube.edit_httproute(
        NS, "checkout", lambda spec: spec["rules"][0]["matches"].append({"path": {"type": "PathPrefix", "value": "/v2"}})))
    assert await r.set_weights(STAGE, STEP5, expect=WITHDRAWN) == STEP5
    assert kube.count("PUT", "/httproutes/checkout") == 2
    assert len(kube.httproute(NS, "checkout")["spec"]["rules"][0]["matches"]) == 2  # the other writer's change kept


async def test_a_withdrawal_wins_over_a_concurrent_writer(kube):
    """`expect=None` (withdraw) re-reads after a 409 and writes again: the canary's weight reaches 0 regardless."""
    kube.seed_httproute(NS, "checkout", refs(90, 5, 5))
    r = router(kube)
    kube.before_next("PUT", "/httproutes/checkout", lambda: kube.edit_httproute(
        NS, "checkout", lambda spec: spec["rules"][0]["backendRefs"][1].update(weight=20)))
    assert await r.set_weights(STAGE, WITHDRAWN, expect=None) == WITHDRAWN
    assert weights_in(kube) == {"checkout": 100, "checkout-canary": 0, "checkout-baseline": 0}


async def test_every_rule_sending_to_the_primary_moves_together(kube):
    kube.seed_httproute(NS, "checkout", [refs(), refs(), [{"name": "static", "port": 80}]])
    r = router(kube)
    assert await r.set_weights(STAGE, STEP5, expect=WITHDRAWN) == STEP5
    assert weights_in(kube, rule=0) == weights_in(kube, rule=1) == {"checkout": 90, "checkout-canary": 5,
                                                                    "checkout-baseline": 5}
    assert kube.httproute(NS, "checkout")["spec"]["rules"][2]["backendRefs"] == [{"name": "static", "port": 80}]


async def test_weights_are_shares_of_what_the_route_says(kube):
    """Gateway API weights are proportional; an omitted weight is 1. A primary alone is 100%."""
    kube.seed_httproute(NS, "checkout", [{"name": "checkout", "port": 8080}])
    assert await router(kube).weights(STAGE) == WITHDRAWN
    assert percent({"primary": 3, "canary": 1, "baseline": 1}) == ArmWeights(primary=60, canary=20, baseline=20)
    assert percent({"primary": 1, "canary": 1, "baseline": 1}) == ArmWeights(primary=34, canary=33, baseline=33)
    assert percent({"primary": 0, "canary": 0, "baseline": 0}) is None


async def test_placeholders_name_the_route_and_services(kube):
    kube.seed_httproute("checkout-prod", "web", [{"name": "checkout-v", "port": 80, "weight": 1},
                                                 {"name": "checkout-c", "port": 80, "weight": 0}])
    r = router(kube, namespace="{service}-prod", route="web", primary="{service}-v", canary="{service}-c",
               baseline="{service}-b")
    assert await r.set_weights(STAGE, ArmWeights.step(10, baseline_same=False), expect=WITHDRAWN) == \
        ArmWeights(primary=90, canary=10)
    route = kube.httproute("checkout-prod", "web")
    assert [ref["weight"] for ref in route["spec"]["rules"][0]["backendRefs"]] == [90, 10]


async def test_an_arm_the_route_lacks_gets_no_share_and_says_how_to_add_it(kube):
    kube.seed_httproute(NS, "checkout", refs(100, 0, None))
    r = router(kube)
    assert await r.weights(STAGE) == WITHDRAWN  # an arm the route does not name has 0
    with pytest.raises(TrafficError) as err:
        await r.set_weights(STAGE, STEP5, expect=WITHDRAWN)
    assert_one_line(str(err.value), "HTTPRoute shop/checkout", "checkout-baseline", "weight 0",
                    "deploy/examples/httproute.yaml")
    assert err.value.retryable is False
    assert kube.count("PUT", "/httproutes/") == 0


async def test_a_rule_with_other_backends_is_refused(kube):
    kube.seed_httproute(NS, "checkout", [*refs(), {"name": "legacy", "port": 80, "weight": 10}])
    with pytest.raises(TrafficError) as err:
        await router(kube).weights(STAGE)
    assert_one_line(str(err.value), "HTTPRoute shop/checkout", "Service legacy (weight 10)")


async def test_a_missing_route_names_it_and_how_to_create_it(kube):
    with pytest.raises(TrafficError) as err:
        await router(kube).weights(STAGE)
    assert_one_line(str(err.value), "404 Not Found", "GET httproutes.gateway.networking.k8s.io/shop/checkout",
                    "HTTPRoute shop/checkout does not exist", "kubectl apply -f deploy/examples/httproute.yaml")
    assert err.value.retryable is False


async def test_a_route_without_the_primary_is_refused(kube):
    kube.seed_httproute(NS, "checkout", [{"name": "other", "port": 80}])
    with pytest.raises(TrafficError) as err:
        await router(kube).set_weights(STAGE, WITHDRAWN, expect=None)
    assert_one_line(str(err.value), "HTTPRoute shop/checkout", "no rule names Service checkout")


async def test_forbidden_names_the_rbac_to_grant(kube):
    kube.seed_httproute(NS, "checkout", refs())
    kube.fail_next(1, 403, method="PUT", path_contains="/httproutes/")
    with pytest.raises(TrafficError) as err:
        await router(kube).set_weights(STAGE, STEP5, expect=WITHDRAWN)
    assert_one_line(str(err.value), "403 Forbidden", "UPDATE httproutes.gateway.networking.k8s.io/shop/checkout",
                    "grant get and update on httproutes.gateway.networking.k8s.io in namespace shop")
    assert err.value.retryable is False
    assert weights_in(kube)["checkout"] == 100


async def test_server_errors_are_retried_then_retryable(kube):
    kube.seed_httproute(NS, "checkout", refs())
    kube.fail_next(2, 503, method="GET", path_contains="/httproutes/")
    assert await router(kube).weights(STAGE) == WITHDRAWN  # two 503s, then an answer
    kube.fail_next(10, 500, method="GET", path_contains="/httproutes/")
    with pytest.raises(TrafficError) as err:
        await router(kube).weights(STAGE)
    assert err.value.retryable is True
    assert_one_line(str(err.value), "500 Internal Server Error", "4 attempts")


async def test_no_gateway_api_in_the_cluster(kube):
    """Without the CRDs, the API server knows no such path: the 404 says so, not "the route does not exist"."""
    r = GatewayApiRouter(lambda: k8s.ApiClient(k8s.Configuration(host=kube.url + "/nowhere")),
                         GatewayRouteSettings(namespace=NS))
    with pytest.raises(TrafficError) as err:
        await r.weights(STAGE)
    assert_one_line(str(err.value), "404 Not Found", "install the Gateway API CRDs")


async def test_the_fake_refuses_what_the_real_server_refuses(kube):
    """The fake's HTTPRoute is a custom resource: no update without a resourceVersion, no strategic merge patch,
    weights within the CRD's bounds, merge patches guarded by a resourceVersion they carry."""
    kube.seed_httproute(NS, "checkout", refs())
    api = k8s.CustomObjectsApi(k8s.ApiClient(k8s.Configuration(host=kube.url)))
    route = api.get_namespaced_custom_object("gateway.networking.k8s.io", "v1", NS, "httproutes", "checkout")
    unguarded = {**route, "metadata": {k: v for k, v in route["metadata"].items() if k != "resourceVersion"}}
    with pytest.raises(k8s.ApiException) as err:
        api.replace_namespaced_custom_object("gateway.networking.k8s.io", "v1", NS, "httproutes", "checkout", unguarded)
    assert err.value.status == 422
    route["spec"]["rules"][0]["backendRefs"][0]["weight"] = 1000001
    with pytest.raises(k8s.ApiException) as err:
        api.replace_namespaced_custom_object("gateway.networking.k8s.io", "v1", NS, "httproutes", "checkout", route)
    assert err.value.status == 422
    stale = {"metadata": {"resourceVersion": "1"}, "spec": {"parentRefs": [{"name": "other"}]}}
    with pytest.raises(k8s.ApiException) as err:
        api.patch_namespaced_custom_object("gateway.networking.k8s.io", "v1", NS, "httproutes", "checkout", stale)
    assert err.value.status == 409
    fresh = {"metadata": {"resourceVersion": route["metadata"]["resourceVersion"]},
             "spec": {"parentRefs": [{"name": "other"}]}}
    patched = api.patch_namespaced_custom_object("gateway.networking.k8s.io", "v1", NS, "httproutes", "checkout", fresh)
    assert patched["spec"]["parentRefs"] == [{"name": "other"}] and patched["metadata"]["generation"] == 2
    with pytest.raises(k8s.ApiException) as err:
        api.patch_namespaced_custom_object("gateway.networking.k8s.io", "v1", NS, "httproutes", "checkout", {},
                                           _content_type="application/strategic-merge-patch+json")
    assert err.value.status == 415
