"""The `gateway-api` canary router: the weights of a Kubernetes Gateway API HTTPRoute's backendRefs.

The route names three Services, one per arm (primary, canary, baseline); every rule that sends to the primary's
Service gets the arms' weights. Reads and writes go through the official client's CustomObjectsApi; a write is a
replace carrying the resourceVersion it read, so the API server refuses it (409) when anyone changed the route in
between, and a changed weight is then a RouterConflict, never an overwrite. Bifrost changes the weights of
backendRefs the route already has; it adds none (a canary Service the route does not name gets no traffic).
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from activities.adapters.base import TrafficError, http_status
from activities.adapters.kubernetes.deployer import KubeRequest, _status_message, _transport_text
from activities.adapters.lazy import LazyClient
from activities.adapters.retry import Backoff, retrying
from activities.adapters.routers.base import RouterConflict, RouterKind
from activities.adapters.routers.shares import ARMS, percent
from common.traffic.arms import ArmWeights
from common.types import StageRef

log = logging.getLogger(__name__)

T = TypeVar("T")

GROUP, VERSION, PLURAL = "gateway.networking.k8s.io", "v1", "httproutes"
RESOURCE = f"{PLURAL}.{GROUP}"  # as RBAC and kubectl name it
EXAMPLE = "deploy/examples/httproute.yaml"


@dataclass(frozen=True)
class GatewayRouteSettings:
    """Which HTTPRoute and which Services are the arms; `{service}` in every name becomes the stage's service."""

    namespace: str
    route: str = "{service}"
    primary: str = "{service}"
    canary: str = "{service}-canary"
    baseline: str = "{service}-baseline"
    request_timeout_seconds: float = 30.0
    max_attempts: int = 4  # per API call on 5xx/429/connection errors, and per write on a 409 that moved no weight
    backoff_seconds: float = 0.5

    def where(self, stage: StageRef) -> tuple[str, str, dict[str, str]]:
        """(namespace, route name, Service name by arm) for one stage's service."""
        def fill(template: str) -> str:
            return template.replace("{service}", stage.service)

        return fill(self.namespace), fill(self.route), {arm: fill(getattr(self, arm)) for arm in ARMS}


class _Conflict(Exception):
    """The API server refused a write as stale (409)."""


class GatewayApiRouter:
    """Reads and sets the arm weights of a stage's HTTPRoute (see the module docstring)."""

    kind: RouterKind = "gateway-api"

    def __init__(self, client_factory: Callable[[], k8s.ApiClient], settings: GatewayRouteSettings) -> None:
        self._factory = client_factory
        self.settings = settings
        self._client = LazyClient(client_factory, "Kubernetes", error=TrafficError,
                                  hint="check kubeconfig/context or api_url of the router in the targets file")

    def _api(self) -> k8s.CustomObjectsApi:
        return k8s.CustomObjectsApi(self._client.get())

    # -- the protocol ------------------------------------------------------------------------------
    async def weights(self, stage: StageRef) -> ArmWeights:
        ns, name, arms = self.settings.where(stage)
        route = await self._read(stage)
        current = _route_weights(route, ns, name, arms)
        if current is None:
            raise TrafficError(f"could not read the canary weights of {stage.key}", target=f"HTTPRoute {ns}/{name}",
                               status="no single split", detail=_rules_line(route, arms),
                               hint="give every rule that sends to the primary the same weights, not all 0 (a "
                                    "withdrawal sets them all)", retryable=False)
        return current

    async def set_weights(self, stage: StageRef, want: ArmWeights, *, expect: ArmWeights | None) -> ArmWeights:
        ns, name, arms = self.settings.where(stage)
        where = f"HTTPRoute {ns}/{name}"
        for attempt in range(1, self.settings.max_attempts + 1):
            route = await self._read(stage)
            current = _route_weights(route, ns, name, arms)
            if current == want:
                return want  # already in force: a retry after a write that landed, or a repeated step
            if expect is not None and current != expect:
                raise _conflict(stage, where, expect, current, route, arms)
            body = _with_weights(route, ns, name, arms, want)
            req = KubeRequest("update", RESOURCE, ns, name)
            try:
                written = await self._call(f"could not set the canary weights of {stage.key} to {want.line()}", req,
                                           self._api().replace_namespaced_custom_object, GROUP, VERSION, ns, PLURAL,
                                           name, body)
            except _Conflict:
                log.info("%s: %s changed between read and write (attempt %d), re-reading", stage.key, where, attempt)
                continue  # re-read: in force now -> done; still `expect` (only other fields moved) -> write again
            after = _route_weights(written, ns, name, arms)
            if after != want:  # the server (a webhook, a mutating admission) wrote something else
                raise TrafficError(f"could not set the canary weights of {stage.key}", target=where,
                                   status="read back differs", detail=f"wrote {want.line()}, the route says "
                                   f"{after.line() if after else _rules_line(written, arms)}",
                                   hint="a mutating webhook or controller rewrites the route's weights; the activity "
                                        "will be retried", retryable=True)
            return after
        raise TrafficError(f"could not set the canary weights of {stage.key}", target=where, status=http_status(409),
                           detail=f"{self.settings.max_attempts} writes in a row found the route changed",
                           hint="another controller keeps writing the route (GitOps sync, another rollout tool?); "
                                "the activity will be retried", retryable=True)

    # -- I/O -----------------------------------------------------------------------------------------
    async def _read(self, stage: StageRef) -> dict[str, Any]:
        ns, name, _ = self.settings.where(stage)
        route: dict[str, Any] = await self._call(
            f"could not read the canary weights of {stage.key}", KubeRequest("get", RESOURCE, ns, name),
            self._api().get_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, name)
        return route

    async def _call(self, failed: str, req: KubeRequest, fn: Callable[..., T], *args: Any) -> T:
        """One API call in a thread: retries 5xx/429/connection errors, raises _Conflict on 409, TrafficError else."""
        s = self.settings

        def failure(err: Exception, attempt: int) -> TrafficError:
            if isinstance(err, ApiException):
                if (err.status or 0) == 409:
                    raise _Conflict(_status_message(err)) from err
                last = _status_error(failed, req, err, attempts=attempt)
                if not last.retryable:
                    raise last from err
                return last
            return TrafficError(failed, target=str(req), status="connection failed", detail=_transport_text(err),
                                hint=f"cannot reach the Kubernetes API server ({attempt} attempts); check the "
                                     "router's connection in the targets file; the activity will be retried")

        return await retrying(lambda: asyncio.to_thread(fn, *args, _request_timeout=s.request_timeout_seconds),
                              retry_on=(ApiException, urllib3.exceptions.HTTPError, OSError), failure=failure,
                              backoff=Backoff(s.max_attempts, s.backoff_seconds),
                              note=lambda last, attempt, _: f"{req}: {last.status}; retry {attempt}")


# -- the route, as data ------------------------------------------------------------------------------------
def _is_arm(ref: dict[str, Any], route_ns: str, service: str) -> bool:
    """Whether a backendRef is that Service in the route's namespace (kind and group default to a core Service)."""
    return (ref.get("name") == service and ref.get("kind", "Service") == "Service" and ref.get("group", "") == ""
            and ref.get("namespace", route_ns) == route_ns)


def _arm_of(ref: dict[str, Any], route_ns: str, arms: dict[str, str]) -> str | None:
    return next((arm for arm, svc in arms.items() if _is_arm(ref, route_ns, svc)), None)


def _canary_rules(route: dict[str, Any], ns: str, name: str, arms: dict[str, str]) -> list[dict[str, Any]]:
    """The rules that send to the primary's Service: the ones whose weights are the canary's share."""
    rules = [r for r in ((route.get("spec") or {}).get("rules") or [])
             if any(_is_arm(ref, ns, arms["primary"]) for ref in r.get("backendRefs") or [])]
    if not rules:
        raise TrafficError("the HTTPRoute sends nothing to the primary", target=f"HTTPRoute {ns}/{name}",
                           status="no rule names Service " + arms["primary"],
                           hint=f"add backendRefs for Services {arms['primary']}, {arms['canary']} (weight 0) and "
                                f"{arms['baseline']} (weight 0) to the route, or fix primary in the targets file "
                                f"(example: {EXAMPLE})", retryable=False)
    return rules


def _raw(rule: dict[str, Any], ns: str, arms: dict[str, str]) -> tuple[dict[str, int], list[str]]:
    """(weight per arm, other backends that get traffic) of one rule; an omitted weight is 1, as the API defines."""
    raw = dict.fromkeys(ARMS, 0)
    others = []
    for ref in rule.get("backendRefs") or []:
        weight = int(ref.get("weight", 1))
        arm = _arm_of(ref, ns, arms)
        if arm is not None:
            raw[arm] += weight
        elif weight > 0:
            others.append(f"{ref.get('kind', 'Service')} {ref.get('name')} (weight {weight})")
    return raw, others


def _route_weights(route: dict[str, Any], ns: str, name: str, arms: dict[str, str]) -> ArmWeights | None:
    """The arms' shares in force, or None when there is no single split (the canary rules disagree, or weigh 0). Refuses a route whose canary rules send
    traffic to backends that are not arms (the shares would not be what Bifrost set)."""
    found: set[ArmWeights | None] = set()
    for rule in _canary_rules(route, ns, name, arms):
        raw, others = _raw(rule, ns, arms)
        if others:
            raise TrafficError("the HTTPRoute's rule sends traffic to other backends", target=f"HTTPRoute {ns}/{name}",
                               status="unknown backends", detail=", ".join(others),
                               hint="a canary rule may name only the primary, canary and baseline Services of the "
                                    "targets file; set the others' weight to 0 or move them to a rule of their own",
                               retryable=False)
        found.add(percent(raw))
    return found.pop() if len(found) == 1 else None


def _rules_line(route: dict[str, Any], arms: dict[str, str]) -> str:
    """The raw weights of every rule, in words (for a message)."""
    ns = (route.get("metadata") or {}).get("namespace", "")
    rules = (route.get("spec") or {}).get("rules") or []
    return "; ".join(f"rule {i}: {json.dumps(_raw(r, ns, arms)[0])}" for i, r in enumerate(rules))


def _with_weights(route: dict[str, Any], ns: str, name: str, arms: dict[str, str], want: ArmWeights) -> dict[str, Any]:
    """The route with `want` on every canary rule (its resourceVersion kept: the write's precondition)."""
    body = copy.deepcopy(route)
    for rule in _canary_rules(body, ns, name, arms):
        seen: set[str] = set()
        for ref in rule.get("backendRefs") or []:
            arm = _arm_of(ref, ns, arms)
            if arm is not None:
                ref["weight"] = 0 if arm in seen else getattr(want, arm)  # a Service listed twice: its share once
                seen.add(arm)
        missing = [arm for arm in ARMS if arm not in seen and getattr(want, arm) > 0]
        if missing:
            raise TrafficError(f"could not give the {' and '.join(missing)} a share", target=f"HTTPRoute {ns}/{name}",
                               status="backendRef missing", detail=f"the rule sending to {arms['primary']} does not "
                               f"name Service(s) {', '.join(arms[a] for a in missing)}",
                               hint="add them to the rule's backendRefs with weight 0 (Bifrost changes weights, it "
                                    f"adds no backends; example: {EXAMPLE})", retryable=False)
    return body


def _conflict(stage: StageRef, where: str, expect: ArmWeights, current: ArmWeights | None, route: dict[str, Any],
              arms: dict[str, str]) -> RouterConflict:
    found = current.line() if current is not None else f"no single split ({_rules_line(route, arms)})"
    return RouterConflict(f"the canary weights of {stage.key} changed under Bifrost", target=where,
                          status="weights changed", detail=f"expected {expect.line()}, found {found}",
                          hint="someone else (or an earlier attempt) set them; re-read and decide", retryable=False)


def _status_error(failed: str, req: KubeRequest, err: ApiException, *, attempts: int) -> TrafficError:
    """The one-line TrafficError for an API answer other than 409, with what to do about it."""
    status = err.status or 0
    retryable = status == 429 or status >= 500
    detail = _status_message(err)
    ns, name = req.namespace, req.name
    if status == 404 and "could not find the requested resource" in detail:
        hint = (f"the cluster serves no {RESOURCE}: install the Gateway API CRDs (v1) and a Gateway controller, "
                "or point the router at the right cluster")
    elif status == 404:
        hint = (f"HTTPRoute {ns}/{name} does not exist; create it with backendRefs for the primary, canary and baseline "
                f"Services (kubectl apply -f {EXAMPLE}), or fix namespace/route in the targets file")
    elif status == 403:
        hint = (f"grant get and update on {RESOURCE} in namespace {ns} to the worker's service account "
                "(a Role and RoleBinding, see docs/targets.md)")
    elif status == 401:
        hint = ("the API server rejected the worker's credentials; refresh the kube context's credentials or the "
                "token named by token_env in the targets file")
    elif status == 422:
        hint = "the API server refused the route as invalid; fix what it names in the route"
    elif retryable:
        hint = f"the API server is overloaded or failing ({attempts} attempts); the activity will be retried"
    else:
        hint = "unexpected answer from the API server; please report it with this line"
    return TrafficError(failed, target=str(req), status=http_status(status) if status else "client error",
                        detail=detail, hint=hint, retryable=retryable)
