"""The `alb` canary router end to end: boto3's elbv2 client against moto in server mode (weighted forward actions on a
listener rule and on a listener's default action). Other writers are injected with botocore's own call events."""

from __future__ import annotations

import types
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from activities.adapters.base import TrafficError
from activities.adapters.routers.alb import AlbRouter, AlbSettings
from activities.adapters.routers.base import RouterConflict, TrafficRouter
from common.traffic.arms import WITHDRAWN, ArmWeights
from common.types import StageRef
from tests.integration.conftest import MotoServer, assert_one_line

pytestmark = pytest.mark.integration

STAGE = StageRef(service="checkout", region="us-east-1", environment="prod")
STEP5 = ArmWeights.step(5)


@dataclass
class Alb:
    moto: MotoServer
    listener: str
    rule: str
    tgs: dict[str, str]  # primary, canary, baseline, other -> target group ARN

    def settings(self, **kw: Any) -> AlbSettings:
        where = kw.pop("where", {"rule_arn": self.rule})
        return AlbSettings(service="checkout", primary=self.tgs["primary"], canary=self.tgs["canary"],
                           baseline=self.tgs["baseline"], backoff_seconds=0.01, **where, **kw)

    def weights(self, *, listener: bool = False) -> dict[str, int]:
        """What the load balancer holds, by arm name, read with a client of the test's own."""
        elb = self.moto.client("elbv2")
        actions = (elb.describe_listeners(ListenerArns=[self.listener])["Listeners"][0]["DefaultActions"] if listener
                   else elb.describe_rules(RuleArns=[self.rule])["Rules"][0]["Actions"])
        names = {arn: arm for arm, arn in self.tgs.items()}
        fwd = next(a for a in actions if a["Type"] == "forward")
        return {names[g["TargetGroupArn"]]: g["Weight"] for g in fwd["ForwardConfig"]["TargetGroups"]}

    def set(self, weights: dict[str, int]) -> None:
        """Another writer (a person, CodeDeploy, IaC) replaces the rule's forward action."""
        self.moto.client("elbv2").modify_rule(RuleArn=self.rule, Actions=[forward(self.tgs, weights)])


def forward(tgs: dict[str, str], weights: dict[str, int]) -> dict[str, Any]:
    return {"Type": "forward", "ForwardConfig": {"TargetGroups": [
        {"TargetGroupArn": tgs[arm], "Weight": w} for arm, w in weights.items()]}}


def load_balancer(moto_server: MotoServer, region: str = "us-east-1") -> tuple[Any, str, str, str]:
    """A fresh load balancer on moto (its own VPC, two subnets in `region`): the elbv2 client, the VPC id, its ARN
    and a tag that keeps the names of what a test adds to it unique."""
    ec2, elb = moto_server.client("ec2", region), moto_server.client("elbv2", region)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = [ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24", AvailabilityZone=f"{region}{z}")["Subnet"][
        "SubnetId"] for i, z in ((1, "a"), (2, "b"))]
    tag = uuid.uuid4().hex[:8]
    lb = elb.create_load_balancer(Name=f"lb-{tag}", Subnets=subnets)["LoadBalancers"][0]["LoadBalancerArn"]
    return elb, vpc, lb, tag


@pytest.fixture
def alb(moto_server: MotoServer, aws_credentials: None) -> Alb:
    """A load balancer whose listener forwards to the primary alone, and a /api/* rule over all three arms."""
    elb, vpc, lb, tag = load_balancer(moto_server)
    tgs = {arm: elb.create_target_group(Name=f"{arm[:5]}-{tag}", Protocol="HTTP", Port=80, VpcId=vpc)[
        "TargetGroups"][0]["TargetGroupArn"] for arm in ("primary", "canary", "baseline", "other")}
    listener = elb.create_listener(LoadBalancerArn=lb, Protocol="HTTP", Port=80, DefaultActions=[
        forward(tgs, {"primary": 100, "canary": 0, "baseline": 0})])["Listeners"][0]["ListenerArn"]
    rule = elb.create_rule(ListenerArn=listener, Priority=10, Conditions=[{"Field": "path-pattern", "Values": ["/api/*"]}],
                           Actions=[forward(tgs, {"primary": 100, "canary": 0, "baseline": 0})])["Rules"][0]["RuleArn"]
    return Alb(moto_server, listener, rule, tgs)


class Calls:
    """The router's own elbv2 client, with a count of each operation it sent and hooks run around them."""

    def __init__(self, moto: MotoServer) -> None:
        from botocore.config import Config

        # botocore retries nothing here, so a retry the test sees is the router's own
        self.client = _client(moto, Config(retries={"total_max_attempts": 1}))
        self.sent: dict[str, int] = {}
        self.service = self.client.meta.service_model.service_id.hyphenize()
        self.client.meta.events.register(f"after-call.{self.service}", self._count)  # also for an injected answer

    def _count(self, model: Any, **_: Any) -> None:
        self.sent[model.name] = self.sent.get(model.name, 0) + 1

    def once(self, when: str, operation: str, fn: Callable[[], Any]) -> None:
        """Run `fn` once, `when` ('before' or 'after') the router's next `operation` call; what it returns (a fake
        answer) replaces the call's own when run before it."""
        event = f"{when}-call.{self.service}.{operation}"
        fired: list[bool] = []

        def hook(**_: Any) -> Any:
            if fired:
                return None
            fired.append(True)
            return fn()

        self.client.meta.events.register(event, hook)


def _client(moto: MotoServer, config: Any) -> Any:
    import boto3

    return boto3.client("elbv2", endpoint_url=moto.endpoint, region_name="us-east-1", aws_access_key_id="testing",
                        aws_secret_access_key="testing", config=config)


def router(alb: Alb, calls: Calls, **kw: Any) -> AlbRouter:
    return AlbRouter(alb.settings(**kw), lambda: calls.client)


async def test_reads_steps_and_withdraws_a_rule(alb, moto_server):
    calls = Calls(moto_server)
    r = router(alb, calls)
    assert isinstance(r, TrafficRouter)
    assert await r.weights(STAGE) == WITHDRAWN
    assert await r.set_weights(STAGE, STEP5, expect=WITHDRAWN) == STEP5
    assert alb.weights() == {"primary": 90, "canary": 5, "baseline": 5}
    step25 = ArmWeights.step(25)
    assert await r.set_weights(STAGE, step25, expect=STEP5) == step25
    assert await r.set_weights(STAGE, WITHDRAWN, expect=None) == WITHDRAWN
    assert alb.weights() == {"primary": 100, "canary": 0, "baseline": 0}
    rule = moto_server.client("elbv2").describe_rules(RuleArns=[alb.rule])["Rules"][0]
    assert rule["Conditions"] == [{"Field": "path-pattern", "Values": ["/api/*"]}]  # the rest of the rule kept
    assert calls.sent["ModifyRule"] == 3


async def test_steps_a_listeners_default_action(alb, moto_server):
    calls = Calls(moto_server)
    r = router(alb, calls, where={"listener_arn": alb.listener})
    assert await r.set_weights(STAGE, ArmWeights.step(10, baseline_same=False), expect=WITHDRAWN) == \
        ArmWeights(primary=90, canary=10)
    assert alb.weights(listener=True) == {"primary": 90, "canary": 10, "baseline": 0}
    assert alb.weights() == {"primary": 100, "canary": 0, "baseline": 0}  # the rule untouched
    assert calls.sent == {"DescribeListeners": 2, "ModifyListener": 1}  # read, write, read back


async def test_an_idempotent_retry_writes_nothing(alb, moto_server):
    """A worker killed after its write landed retries the same step: the weights are in force, nothing is written."""
    calls = Calls(moto_server)
    r = router(alb, calls)
    await r.set_weights(STAGE, STEP5, expect=WITHDRAWN)
    assert await r.set_weights(STAGE, STEP5, expect=WITHDRAWN) == STEP5
    await r.set_weights(STAGE, WITHDRAWN, expect=None)
    assert await r.set_weights(STAGE, WITHDRAWN, expect=None) == WITHDRAWN
    assert calls.sent["ModifyRule"] == 2


async def test_a_stale_expect_is_a_conflict_and_writes_nothing(alb, moto_server):
    alb.set({"primary": 80, "canary": 10, "baseline": 10})
    calls = Calls(moto_server)
    with pytest.raises(RouterConflict) as err:
        await router(alb, calls).set_weights(STAGE, ArmWeights.step(25), expect=STEP5)
    assert_one_line(str(err.value), "us-east-1/prod", "ALB rule arn:aws:elasticloadbalancing", "expected primary 90%",
                    "found primary 80%")
    assert err.value.retryable is False
    assert "ModifyRule" not in calls.sent
    assert alb.weights() == {"primary": 80, "canary": 10, "baseline": 10}


async def test_a_writer_after_the_write_is_a_conflict(alb, moto_server):
    """Another writer lands between Bifrost's ModifyRule and its read-back: the read-back catches it."""
    calls = Calls(moto_server)
    calls.once("after", "ModifyRule", lambda: alb.set({"primary": 50, "canary": 50, "baseline": 0}))
    with pytest.raises(RouterConflict) as err:
        await router(alb, calls).set_weights(STAGE, STEP5, expect=WITHDRAWN)
    assert "wrote primary 90% · canary 5% · baseline 5%, read back primary 50% · canary 50% · baseline 0%" in str(err.value)
    assert alb.weights() == {"primary": 50, "canary": 50, "baseline": 0}  # theirs stands; the caller decides


async def test_a_writer_between_read_and_write_is_the_documented_race(alb, moto_server):
    """ALB has no compare-and-set: a change that lands between Bifrost's read and its write is replaced unseen.
    This pins the window the module docstring and docs/targets.md describe (one round trip wide)."""
    calls = Calls(moto_server)
    calls.once("before", "ModifyRule", lambda: alb.set({"primary": 50, "canary": 50, "baseline": 0}))
    assert await router(alb, calls).set_weights(STAGE, STEP5, expect=WITHDRAWN) == STEP5
    assert alb.weights() == {"primary": 90, "canary": 5, "baseline": 5}


async def test_a_withdrawal_writes_again_over_a_concurrent_writer(alb, moto_server):
    alb.set({"primary": 90, "canary": 5, "baseline": 5})
    calls = Calls(moto_server)
    calls.once("after", "ModifyRule", lambda: alb.set({"primary": 60, "canary": 20, "baseline": 20}))
    assert await router(alb, calls).set_weights(STAGE, WITHDRAWN, expect=None) == WITHDRAWN
    assert alb.weights() == {"primary": 100, "canary": 0, "baseline": 0}
    assert calls.sent["ModifyRule"] == 2


async def test_a_plain_forward_to_the_primary_reads_as_withdrawn_and_lacks_the_arms(alb, moto_server):
    moto_server.client("elbv2").modify_rule(RuleArn=alb.rule, Actions=[
        {"Type": "forward", "TargetGroupArn": alb.tgs["primary"]}])
    r = router(alb, Calls(moto_server))
    assert await r.weights(STAGE) == WITHDRAWN
    with pytest.raises(TrafficError) as err:
        await r.set_weights(STAGE, STEP5, expect=WITHDRAWN)
    assert_one_line(str(err.value), "target group missing", alb.tgs["canary"], "Weight 0",
                    "deploy/examples/alb-listener-rule.json")
    assert err.value.retryable is False


async def test_other_target_groups_with_traffic_are_refused(alb, moto_server):
    alb.set({"primary": 90, "canary": 0, "baseline": 0, "other": 10})
    with pytest.raises(TrafficError) as err:
        await router(alb, Calls(moto_server)).weights(STAGE)
    assert_one_line(str(err.value), "unknown targets", f"{alb.tgs['other']} (weight 10)")


async def test_a_missing_rule_names_the_field(alb, moto_server):
    gone = alb.rule[:-4] + "0000"
    with pytest.raises(TrafficError) as err:
        await router(alb, Calls(moto_server), where={"rule_arn": gone}).weights(STAGE)
    assert_one_line(str(err.value), "RuleNotFound", gone, "check rule_arn in the targets file")
    assert err.value.retryable is False


async def test_another_services_stage_is_refused(alb, moto_server):
    with pytest.raises(TrafficError) as err:
        await router(alb, Calls(moto_server)).weights(StageRef(service="cart", region="us-east-1", environment="prod"))
    assert_one_line(str(err.value), "carries checkout")


def _answer(code: str, status: int) -> tuple[Any, dict[str, Any]]:
    return (types.SimpleNamespace(status_code=status),
            {"Error": {"Code": code, "Message": f"injected {code}"}, "ResponseMetadata": {"HTTPStatusCode": status}})


async def test_access_denied_names_the_iam_actions(alb, moto_server):
    calls = Calls(moto_server)
    calls.once("before", "ModifyRule", lambda: _answer("AccessDenied", 403))
    with pytest.raises(TrafficError) as err:
        await router(alb, calls).set_weights(STAGE, STEP5, expect=WITHDRAWN)
    assert_one_line(str(err.value), "AccessDenied (HTTP 403)", "modify_rule", "elasticloadbalancing:ModifyRule",
                    "elasticloadbalancing:DescribeRules")
    assert err.value.retryable is False
    assert alb.weights() == {"primary": 100, "canary": 0, "baseline": 0}


async def test_throttling_is_retried(alb, moto_server):
    calls = Calls(moto_server)
    calls.once("before", "DescribeRules", lambda: _answer("Throttling", 400))
    assert await router(alb, calls).weights(STAGE) == WITHDRAWN
    assert calls.sent["DescribeRules"] == 2


def test_settings_need_exactly_one_place():
    with pytest.raises(ValueError, match="exactly one of rule_arn and listener_arn"):
        AlbSettings(service="s", primary="p", canary="c", baseline="b")
    s = AlbSettings(service="s", primary="p", canary="c", baseline="b",
                    rule_arn="arn:aws:elasticloadbalancing:eu-west-1:123:listener-rule/app/x/1/2/3")
    assert s.region == "eu-west-1"
