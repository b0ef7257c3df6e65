"""The `alb` canary router: the weighted target groups of an Application Load Balancer listener rule's forward action
(or a listener's default action), `ForwardConfig.TargetGroups[].Weight`, through boto3's elbv2 client.

ALB has no compare-and-set: ModifyRule and ModifyListener replace the actions whatever they are now. So a write is
read, compare with `expect`, write, read back. What that catches: a stale `expect` (nothing is written), and a
writer that lands after Bifrost's write and before its read-back (RouterConflict). What it cannot catch: a writer
whose change lands between Bifrost's read and its write, one round trip (tens of milliseconds) wide; Bifrost's
write then replaces that change unseen. Give one owner the rule's weights while a canary runs (docs/targets.md).
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from activities.adapters.aws import (
    CREDENTIAL_CODES,
    PERMISSION_CODES,
    THROTTLING_CODES,
    aws_error,
    aws_status,
    lazy_aws_client,
)
from activities.adapters.base import TrafficError
from activities.adapters.retry import Backoff, retrying
from activities.adapters.routers.base import RouterConflict, RouterKind
from activities.adapters.routers.shares import ARMS, percent
from common.traffic.arms import ArmWeights
from common.types import StageRef

log = logging.getLogger(__name__)

IAM_ACTIONS = ("elasticloadbalancing:DescribeRules, elasticloadbalancing:DescribeListeners, "
               "elasticloadbalancing:ModifyRule, elasticloadbalancing:ModifyListener")
NOT_FOUND = {"RuleNotFound": "rule_arn", "ListenerNotFound": "listener_arn", "TargetGroupNotFound": "primary/canary/baseline",
             "LoadBalancerNotFound": "listener_arn or rule_arn"}


@dataclass(frozen=True)
class AlbSettings:
    """One listener rule (or a listener's default action) carrying `service`'s traffic, and a target group per arm."""

    service: str
    primary: str  # target group ARNs
    canary: str
    baseline: str
    rule_arn: str | None = None
    listener_arn: str | None = None  # its default action, when no rule_arn
    attempts: int = 4  # per call on throttling/5xx/no connection; per withdrawal raced by another writer
    backoff_seconds: float = 0.5

    def __post_init__(self) -> None:
        if (self.rule_arn is None) == (self.listener_arn is None):
            raise ValueError("give exactly one of rule_arn and listener_arn")

    @property
    def arn(self) -> str:
        return self.rule_arn or self.listener_arn or ""

    @property
    def what(self) -> str:
        """The object in words, for messages."""
        return f"ALB rule {self.rule_arn}" if self.rule_arn else f"ALB listener {self.listener_arn} (default action)"

    @property
    def region(self) -> str:
        """The ARN's region (arn:aws:elasticloadbalancing:<region>:...)."""
        parts = self.arn.split(":")
        return parts[3] if len(parts) > 3 else ""

    def arms(self) -> dict[str, str]:
        return {arm: getattr(self, arm) for arm in ARMS}


class AlbRouter:
    """Reads and sets the arm weights of one ALB forward action (see the module docstring)."""

    kind: RouterKind = "alb"

    def __init__(self, settings: AlbSettings, client_factory: Callable[[], Any]) -> None:
        self.settings = settings
        self._elbv2 = lazy_aws_client(client_factory, "elbv2")

    def _check(self, stage: StageRef) -> None:
        if stage.service != self.settings.service:
            raise TrafficError(f"no canary router for {stage.service} in {stage.key}", target=self.settings.what,
                               status="another service's rule",
                               detail=f"the alb router of {stage.key} carries {self.settings.service}",
                               hint="a stage of another service cannot use this rule; give that service no traffic "
                                    "steps here, or its own region/environment target", retryable=False)

    # -- the protocol ------------------------------------------------------------------------------
    async def weights(self, stage: StageRef) -> ArmWeights:
        self._check(stage)
        actions = await self._actions(f"could not read the canary weights of {stage.key}")
        return self._weights(stage, actions)

    async def set_weights(self, stage: StageRef, want: ArmWeights, *, expect: ArmWeights | None) -> ArmWeights:
        self._check(stage)
        s = self.settings
        failed = f"could not set the canary weights of {stage.key} to {want.line()}"
        for attempt in range(1, s.attempts + 1):
            actions = await self._actions(failed)
            current = _current(actions, s)
            if current == want:
                return want  # already in force: a retry after a write that landed, or a repeated step
            if expect is not None and current != expect:
                raise _conflict(stage, s, f"expected {expect.line()}, found {_line(current, actions, s)}")
            await self._write(failed, _with_weights(actions, s, want))
            after_actions = await self._actions(failed)
            after = _current(after_actions, s)
            if after == want:
                return want
            if expect is not None:  # someone wrote after Bifrost did: theirs is in force, not ours
                raise _conflict(stage, s, f"wrote {want.line()}, read back {_line(after, after_actions, s)}")
            log.info("%s: %s read back as %s after a withdrawal (attempt %d); writing again", stage.key, s.what,
                     _line(after, after_actions, s), attempt)
        raise TrafficError(failed, target=s.what, status="kept changing",
                           detail=f"{s.attempts} writes in a row read back someone else's weights",
                           hint="another tool keeps writing this rule (CodeDeploy, a controller, IaC?); give Bifrost "
                                "sole ownership of its weights during a canary; the activity will be retried")

    # -- I/O -----------------------------------------------------------------------------------------
    def _weights(self, stage: StageRef, actions: list[dict[str, Any]]) -> ArmWeights:
        current = _current(actions, self.settings)
        if current is None:
            raise TrafficError(f"could not read the canary weights of {stage.key}", target=self.settings.what,
                               status="every weight is 0", hint="give the primary's target group a weight",
                               retryable=False)
        return current

    async def _actions(self, failed: str) -> list[dict[str, Any]]:
        s, client = self.settings, self._elbv2.get()
        if s.rule_arn:
            resp = await self._aws(failed, client.describe_rules, RuleArns=[s.rule_arn])
            return list(resp["Rules"][0]["Actions"])
        resp = await self._aws(failed, client.describe_listeners, ListenerArns=[s.listener_arn])
        return list(resp["Listeners"][0]["DefaultActions"])

    async def _write(self, failed: str, actions: list[dict[str, Any]]) -> None:
        s, client = self.settings, self._elbv2.get()
        if s.rule_arn:
            await self._aws(failed, client.modify_rule, RuleArn=s.rule_arn, Actions=actions)
        else:
            await self._aws(failed, client.modify_listener, ListenerArn=s.listener_arn, DefaultActions=actions)

    async def _aws(self, failed: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        """One elbv2 call in a thread; throttling, 5xx and no connection are tried again, with a heartbeat."""
        s = self.settings
        op = fn.__name__

        def failure(err: Exception, attempt: int) -> TrafficError:
            if isinstance(err, ClientError):
                code, msg, http = aws_error(err)
                last = _client_error(failed, s, op, code, msg, http, attempt)
                if not last.retryable:
                    raise last from None
                return last
            return TrafficError(failed, target=f"{op} {s.arn}", status="cannot reach elbv2",
                                detail=f"{type(err).__name__}: {err}",
                                hint=f"{attempt} attempts; check the network and the aws endpoint; the activity "
                                     "will be retried")

        return await retrying(lambda: asyncio.to_thread(fn, **kwargs), retry_on=(ClientError, BotoCoreError),
                              failure=failure, backoff=Backoff(s.attempts, s.backoff_seconds),
                              note=lambda last, attempt, _: f"{op}: {last.status}; retry {attempt}")


# -- the forward action, as data ---------------------------------------------------------------------------
def _forward(actions: list[dict[str, Any]], s: AlbSettings) -> dict[str, Any]:
    forwards = [a for a in actions if a.get("Type") == "forward"]
    if len(forwards) != 1:
        raise TrafficError("the ALB action forwards nowhere Bifrost can weigh", target=s.what,
                           status="no forward action" if not forwards else f"{len(forwards)} forward actions",
                           hint="the rule must end in one forward action to the primary, canary and baseline target "
                                "groups (example: deploy/examples/alb-listener-rule.json)", retryable=False)
    return forwards[0]


def _groups(action: dict[str, Any]) -> list[dict[str, Any]]:
    """The forward action's target groups with weights; a plain `TargetGroupArn` is one group of weight 1."""
    groups = (action.get("ForwardConfig") or {}).get("TargetGroups")
    if groups:
        return [{"TargetGroupArn": g["TargetGroupArn"], "Weight": int(g.get("Weight", 1))} for g in groups]
    return [{"TargetGroupArn": action["TargetGroupArn"], "Weight": 1}] if action.get("TargetGroupArn") else []


def _current(actions: list[dict[str, Any]], s: AlbSettings) -> ArmWeights | None:
    """The arms' shares in force (None: every weight 0); refuses target groups that are no arm but get traffic."""
    groups = _groups(_forward(actions, s))
    if not any(g["TargetGroupArn"] == s.primary for g in groups):
        raise TrafficError("the ALB action does not forward to the primary", target=s.what,
                           status="primary target group missing", detail=f"primary is {s.primary}",
                           hint="check primary and rule_arn/listener_arn in the targets file", retryable=False)
    raw = dict.fromkeys(ARMS, 0)
    by_arn = {arn: arm for arm, arn in s.arms().items()}
    others = []
    for g in groups:
        arm = by_arn.get(g["TargetGroupArn"])
        if arm is not None:
            raw[arm] += g["Weight"]
        elif g["Weight"] > 0:
            others.append(f"{g['TargetGroupArn']} (weight {g['Weight']})")
    if others:
        raise TrafficError("the ALB action forwards to other target groups", target=s.what, status="unknown targets",
                           detail=", ".join(others),
                           hint="the forward action may name only the primary, canary and baseline target groups of "
                                "the targets file; set the others' weight to 0", retryable=False)
    return percent(raw)


def _line(weights: ArmWeights | None, actions: list[dict[str, Any]], s: AlbSettings) -> str:
    if weights is not None:
        return weights.line()
    return "all weights 0 (" + ", ".join(f"{g['TargetGroupArn']}: {g['Weight']}" for g in _groups(_forward(actions, s))) + ")"


def _with_weights(actions: list[dict[str, Any]], s: AlbSettings, want: ArmWeights) -> list[dict[str, Any]]:
    """The actions to write: the forward action with `want` in its ForwardConfig, every other action as it was."""
    out = copy.deepcopy(actions)
    forward = _forward(out, s)
    groups = _groups(forward)
    present = {g["TargetGroupArn"] for g in groups}
    missing = [arm for arm in ARMS if getattr(want, arm) > 0 and getattr(s, arm) not in present]
    if missing:
        raise TrafficError(f"could not give the {' and '.join(missing)} a share", target=s.what,
                           status="target group missing",
                           detail=f"the forward action does not name {', '.join(getattr(s, a) for a in missing)}",
                           hint="add them to the action's ForwardConfig.TargetGroups with Weight 0 (Bifrost changes "
                                "weights, it adds no target groups; example: deploy/examples/alb-listener-rule.json)",
                           retryable=False)
    seen: set[str] = set()
    by_arn = {arn: arm for arm, arn in s.arms().items()}
    for g in groups:
        arm = by_arn.get(g["TargetGroupArn"])
        if arm is not None:
            g["Weight"] = 0 if arm in seen else getattr(want, arm)
            seen.add(arm)
    config = dict(forward.get("ForwardConfig") or {})
    config["TargetGroups"] = groups
    forward.pop("TargetGroupArn", None)  # with several groups, only ForwardConfig may name them
    forward["ForwardConfig"] = config
    for action in out:  # a describe never returns the client secret; the write must keep the one in force
        if action.get("Type") == "authenticate-oidc" and "AuthenticateOidcConfig" in action:
            action["AuthenticateOidcConfig"].setdefault("UseExistingClientSecret", True)
    return out


def _conflict(stage: StageRef, s: AlbSettings, detail: str) -> RouterConflict:
    return RouterConflict(f"the canary weights of {stage.key} changed under Bifrost", target=s.what,
                          status="weights changed", detail=detail,
                          hint="someone else (or an earlier attempt) set them; re-read and decide", retryable=False)


def _client_error(failed: str, s: AlbSettings, op: str, code: str, msg: str, http: int | None,
                  attempt: int) -> TrafficError:
    """The one-line TrafficError for an elbv2 error answer, with what to do about it."""
    retryable = code in THROTTLING_CODES or (http is not None and http >= 500)
    if code in NOT_FOUND:
        hint = f"check {NOT_FOUND[code]} in the targets file (aws elbv2 describe-rules --listener-arn ... lists a listener's rules)"
    elif code in PERMISSION_CODES:
        hint = f"allow {IAM_ACTIONS} on the load balancer for the worker's IAM role"
    elif code in CREDENTIAL_CODES:
        hint = "AWS rejected the worker's credentials; check the aws section of the targets file"
    elif retryable:
        hint = f"elbv2 is throttling or failing ({attempt} attempts); the activity will be retried"
    else:
        hint = "AWS refused the change; fix what it names"
    return TrafficError(failed, target=f"{op} {s.arn}", status=aws_status(code, http), detail=msg, hint=hint,
                        retryable=retryable)
