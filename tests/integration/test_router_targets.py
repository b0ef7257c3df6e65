"""Canary routers from a targets file: validation names the field, the registry builds each real router, and both
reach their systems through the file's connections (the Kubernetes deployer's cluster and token, the `aws` section)
without a credential in any message."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from activities.adapters.base import TrafficError
from activities.adapters.registry import registry_from_targets
from activities.adapters.routers.alb import AlbRouter
from activities.adapters.routers.gateway_api import GatewayApiRouter
from activities.adapters.targets import TargetsError, load_targets, parse_targets
from common.traffic.arms import WITHDRAWN, ArmWeights
from common.types import StageRef
from tests.fakes.kube_api import FakeKubeApi
from tests.integration.conftest import MotoServer, assert_one_line
from tests.integration.test_router_alb import forward, load_balancer

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"
EXAMPLE = EXAMPLES / "targets.yaml"
STAGE = StageRef(service="checkout", region="us-east-1", environment="prod")
TG = "arn:aws:elasticloadbalancing:eu-west-1:123456789012:targetgroup/"
RULE = "arn:aws:elasticloadbalancing:eu-west-1:123456789012:listener-rule/app/lb/1/2/3"


def problems(router: dict[str, Any]) -> str:
    with pytest.raises(TargetsError) as err:
        parse_targets({"targets": [{"region": "us-east-1", "environment": "prod", "router": router}]})
    return str(err.value)


@pytest.mark.parametrize("router, words", [
    ({"kind": "gateway-api"}, "targets.0.router.gateway-api.namespace: required field is missing"),
    ({"kind": "gateway-api", "namespace": "shop", "route": "{svc}"},
     "targets.0.router.gateway-api.route: unknown placeholder(s) {svc}; only {service} is allowed"),
    ({"kind": "gateway-api", "namespace": "shop", "canary": "{service}"}, "three different Services"),
    ({"kind": "gateway-api", "namespace": "shop", "api_url": "http://x", "context": "c"}, "not both"),
    ({"kind": "alb", "service": "checkout", "primary": TG + "p/1", "canary": TG + "c/1", "baseline": TG + "b/1"},
     "targets.0.router.alb: give exactly one of rule_arn"),
    ({"kind": "alb", "service": "checkout", "rule_arn": RULE, "primary": "p", "canary": TG + "c/1", "baseline": TG + "b/1"},
     "targets.0.router.alb.primary"),
    ({"kind": "alb", "rule_arn": RULE, "primary": TG + "p/1", "canary": TG + "c/1", "baseline": TG + "b/1"},
     "targets.0.router.alb.service: required field is missing"),
    ({"kind": "istio"}, "targets.0.router"),
])
def test_router_settings_are_validated_naming_the_field(router, words):
    assert words in problems(router)


def test_the_example_file_configures_both_routers(monkeypatch):
    monkeypatch.delenv("BIFROST_KUBE_TOKEN_EUW1", raising=False)  # building reads no secret
    reg = registry_from_targets(load_targets(EXAMPLE))
    gw = reg.canary_routers["us-east-1/prod"]
    alb = reg.canary_routers["eu-west-1/prod"]
    assert isinstance(gw, GatewayApiRouter) and gw.settings.where(STAGE)[:2] == ("checkout", "checkout")
    assert isinstance(alb, AlbRouter) and alb.settings.region == "eu-west-1" and alb.settings.service == "checkout"
    assert "us-east-1/test" not in reg.canary_routers


async def test_gateway_api_through_the_deployers_connection_keeps_the_token_out(monkeypatch, tmp_path):
    """No connection of its own: the router uses the target's Kubernetes deployer's API URL and token; a 401 that
    quotes the token comes back redacted."""
    token = f"kube-token-{uuid.uuid4().hex}"
    monkeypatch.setenv("ROUTER_TEST_KUBE_TOKEN", token)
    with FakeKubeApi(tick_seconds=0.02, token=token, echo_auth_in_401=True) as kube:
        kube.seed_httproute("shop", "checkout", [{"name": "checkout", "port": 8080, "weight": 100},
                                                 {"name": "checkout-canary", "port": 8080, "weight": 0},
                                                 {"name": "checkout-baseline", "port": 8080, "weight": 0}])
        reg = registry_from_targets(parse_targets({"targets": [{
            "region": "us-east-1", "environment": "prod",
            "deployer": {"kind": "kubernetes", "namespace": "shop", "api_url": kube.url, "token_env": "ROUTER_TEST_KUBE_TOKEN"},
            "metrics": {"kind": "simulated"},
            "router": {"kind": "gateway-api", "namespace": "shop"},
        }]}))
        router = reg.canary_routers[STAGE.key]
        assert await router.set_weights(STAGE, ArmWeights.step(5), expect=WITHDRAWN) == ArmWeights.step(5)
        assert {r.authorization for r in kube.requests} == {f"Bearer {token}"}
        kube.token = "rotated"
        with pytest.raises(TrafficError) as err:
            await router.weights(STAGE)
        assert_one_line(str(err.value), "401 Unauthorized", "GET httproutes.gateway.networking.k8s.io/shop/checkout")
        assert token not in str(err.value) and token not in repr(err.value.fields())


async def test_alb_through_the_files_aws_section(moto_server: MotoServer, aws_credentials, monkeypatch):
    elb, vpc, lb, tag = load_balancer(moto_server, "eu-west-1")
    tgs = {arm: elb.create_target_group(Name=f"{arm[:5]}-{tag}", Protocol="HTTP", Port=80, VpcId=vpc)[
        "TargetGroups"][0]["TargetGroupArn"] for arm in ("primary", "canary", "baseline")}
    listener = elb.create_listener(LoadBalancerArn=lb, Protocol="HTTP", Port=80, DefaultActions=[
        forward(tgs, {"primary": 100, "canary": 0, "baseline": 0})])["Listeners"][0]["ListenerArn"]
    monkeypatch.setenv("ROUTER_TEST_AWS_KEY", "AKIAROUTERTEST000001")
    monkeypatch.setenv("ROUTER_TEST_AWS_SECRET", f"secret-{uuid.uuid4().hex}")
    reg = registry_from_targets(parse_targets({
        "aws": {"endpoint_url": moto_server.endpoint, "access_key_id_env": "ROUTER_TEST_AWS_KEY",
                "secret_access_key_env": "ROUTER_TEST_AWS_SECRET"},
        "targets": [{"region": "eu-west-1", "environment": "prod", "deployer": {"kind": "simulated"},
                     "metrics": {"kind": "simulated"},
                     "router": {"kind": "alb", "service": "checkout", "listener_arn": listener, **tgs}}],
    }))
    stage = StageRef(service="checkout", region="eu-west-1", environment="prod")
    router = reg.canary_routers[stage.key]
    assert await router.set_weights(stage, ArmWeights.step(25), expect=WITHDRAWN) == ArmWeights.step(25)
    assert await router.weights(stage) == ArmWeights.step(25)
    assert await router.set_weights(stage, WITHDRAWN, expect=None) == WITHDRAWN


async def test_the_example_httproute_steps_as_documented():
    """deploy/examples/httproute.yaml, created through the real client, works with the router the example targets
    file builds for us-east-1/prod (its connection swapped for the fake's)."""
    docs = list(yaml.safe_load_all((EXAMPLES / "httproute.yaml").read_text()))
    route = next(d for d in docs if d["kind"] == "HTTPRoute")
    role = next(d for d in docs if d["kind"] == "Role")
    assert role["rules"] == [{"apiGroups": ["gateway.networking.k8s.io"], "resources": ["httproutes"],
                              "verbs": ["get", "update"]}]
    services = {d["metadata"]["name"]: d["spec"]["selector"] for d in docs if d["kind"] == "Service"}
    assert {s["bifrost.dev/role"] for s in services.values()} == {"primary", "canary", "baseline"}
    with FakeKubeApi(tick_seconds=0.02) as kube:
        api = k8s.CustomObjectsApi(k8s.ApiClient(k8s.Configuration(host=kube.url)))
        api.create_namespaced_custom_object("gateway.networking.k8s.io", "v1", "checkout", "httproutes", route)
        example = registry_from_targets(load_targets(EXAMPLE)).canary_routers[STAGE.key]
        assert isinstance(example, GatewayApiRouter)
        router = GatewayApiRouter(lambda: k8s.ApiClient(k8s.Configuration(host=kube.url)), example.settings)
        assert await router.set_weights(STAGE, ArmWeights.step(5), expect=WITHDRAWN) == ArmWeights.step(5)
        assert await router.set_weights(STAGE, WITHDRAWN, expect=None) == WITHDRAWN
        assert kube.count("PUT", "/httproutes/checkout") == 2


async def test_the_example_alb_rule_steps_as_documented(moto_server: MotoServer, aws_credentials):
    """deploy/examples/alb-listener-rule.json (its ARNs swapped for moto's) is a rule the alb router steps."""
    elb, vpc, lb, tag = load_balancer(moto_server)
    text = (EXAMPLES / "alb-listener-rule.json").read_text()
    example = json.loads(text)
    old = [g["TargetGroupArn"] for g in example["Actions"][0]["ForwardConfig"]["TargetGroups"]]
    new = [elb.create_target_group(Name=f"{arm}-{tag}", Protocol="HTTP", Port=80, VpcId=vpc)["TargetGroups"][0][
        "TargetGroupArn"] for arm in ("p", "c", "b")]
    listener = elb.create_listener(LoadBalancerArn=lb, Protocol="HTTP", Port=80, DefaultActions=[
        {"Type": "forward", "TargetGroupArn": new[0]}])["Listeners"][0]["ListenerArn"]
    for a, b in [*zip(old, new, strict=True), (example["ListenerArn"], listener)]:
        text = text.replace(a, b)
    rule = elb.create_rule(**json.loads(text))["Rules"][0]["RuleArn"]
    from activities.adapters.routers.alb import AlbSettings

    router = AlbRouter(AlbSettings(service="checkout", rule_arn=rule, primary=new[0], canary=new[1], baseline=new[2]),
                       lambda: moto_server.client("elbv2"))
    assert await router.set_weights(STAGE, ArmWeights.step(5), expect=WITHDRAWN) == ArmWeights.step(5)
    assert await router.set_weights(STAGE, WITHDRAWN, expect=None) == WITHDRAWN
