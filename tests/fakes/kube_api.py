"""A small fake Kubernetes API server for apps/v1 Deployments, autoscaling/v2 HorizontalPodAutoscalers, Gateway API
HTTPRoutes (a custom resource, gateway.networking.k8s.io/v1) and read-only Pods, for driving the official client.

It behaves like the real apiserver where the Bifrost deployer depends on it: resourceVersion preconditions
and 409s, generation bumps on spec changes only, status converging over controller ticks with
Progressing/Available conditions and ProgressDeadlineExceeded, strategic-merge/merge/JSON patches,
422 validation of the obvious invariants, Status error bodies, and injectable faults. Its HPA controller
keeps every Deployment an HPA targets at its metric-driven recommendation (`set_load`) bounded by
[minReplicas, maxReplicas], on every controller tick (a real one syncs every 15 s), so a plain replicas
patch is undone as in a real cluster. HTTPRoutes are served as a custom resource is: an update must carry the
resourceVersion it read (422 without one, 409 when stale), merge and JSON patches only (a strategic merge patch is
415, as for every custom resource), backendRef weights checked against the CRD's bounds, status ignored on the main
resource. It does not model ReplicaSets, surge pacing, watches, server-side
apply, admission, or HPA metrics and scaling policies.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

_DEPLOYMENTS = re.compile(r"^/apis/apps/v1/namespaces/(?P<ns>[^/]+)/deployments(?:/(?P<name>[^/]+))?(?P<status>/status)?$")
_HPAS = re.compile(
    r"^/apis/autoscaling/v2/namespaces/(?P<ns>[^/]+)/horizontalpodautoscalers(?:/(?P<name>[^/]+))?(?P<status>/status)?$")
_HTTPROUTES = re.compile(
    r"^/apis/gateway\.networking\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/httproutes(?:/(?P<name>[^/]+))?(?P<status>/status)?$")
_PODS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods$")
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

# Strategic-merge list keys the Deployment schema declares (patchMergeKey), by field name.
_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "imagePullSecrets": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "conditions": "type",
}


class ApiError(Exception):
    """Returned to the client as a Status body with this HTTP code."""

    def __init__(self, code: int, reason: str, message: str, name: str | None = None, *, group: str = "apps",
                 kind: str = "deployments") -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.name = code, reason, message, name
        self.group, self.kind = group, kind


@dataclass
class Fault:
    """Answer the next `remaining` matching requests with `status` instead of serving them."""

    status: int
    remaining: int
    method: str | None = None
    path_contains: str | None = None

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method == method) and (self.path_contains is None or self.path_contains in path)


@dataclass
class _Rollout:
    """Controller-side bookkeeping per Deployment (what the real controller keeps in ReplicaSets)."""

    template_hash: str = ""
    old_replicas: int = 0  # pods of the previous template still serving
    updated: int = 0
    ready: int = 0
    last_progress: float = 0.0
    revision: int = 0
    deadline_exceeded: bool = False


@dataclass
class RecordedRequest:
    method: str
    path: str
    content_type: str
    authorization: str


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:10]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Kubernetes strategic merge for the fields Deployments use: maps merge, keyed lists merge by key."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif key in _MERGE_KEYS and isinstance(value, list):
            result[key] = _merge_list(result.get(key) or [], value, _MERGE_KEYS[key])
        else:
            result[key] = strategic_merge_patch(result.get(key), value)
    return result


def _merge_list(current: list[Any], patch: list[Any], key: str) -> list[Any]:
    out = copy.deepcopy(current)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise ApiError(400, "BadRequest", f"strategic merge patch: list item without merge key {key!r}")
        idx = next((i for i, cur in enumerate(out) if isinstance(cur, dict) and cur.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
        elif idx is None:
            out.append({k: v for k, v in item.items() if k != "$patch"})
        else:
            out[idx] = strategic_merge_patch(out[idx], item)
    return out


def json_patch(target: Any, ops: list[dict[str, Any]]) -> Any:
    """RFC 6902 JSON patch: add, replace, remove, test."""
    doc = copy.deepcopy(target)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent[p]
        last = parts[-1]
        kind = op["op"]
        if kind == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if current != op["value"]:
                raise ApiError(422, "Invalid", f"json patch test failed at {op['path']}")
        elif kind in ("add", "replace"):
            if isinstance(parent, list):
                if last == "-":
                    parent.append(op["value"])
                elif kind == "add":
                    parent.insert(int(last), op["value"])
                else:
                    parent[int(last)] = op["value"]
            else:
                if kind == "replace" and last not in parent:
                    raise ApiError(422, "Invalid", f"json patch replace: {op['path']} does not exist")
                parent[last] = op["value"]
        elif kind == "remove":
            if isinstance(parent, list):
                parent.pop(int(last))
            else:
                parent.pop(last)
        else:
            raise ApiError(400, "BadRequest", f"json patch op {kind!r} not supported by the fake")
    return doc


def _selector_matches(selector: str | None, labels: dict[str, str]) -> bool:
    """Equality-based label selectors (`a=b,c==d,e!=f`), which is all the client sends here."""
    if not selector:
        return True
    for term in selector.split(","):
        term = term.strip()
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif term and term not in labels:
            return False
    return True


class FakeKubeApi:
    """apps/v1 Deployments on 127.0.0.1 with a background 'controller'; use as a context manager."""

    def __init__(self, *, tick_seconds: float = 0.05, token: str | None = None, echo_auth_in_401: bool = False) -> None:
        self.tick_seconds = tick_seconds
        self.token = token
        self.echo_auth_in_401 = echo_auth_in_401  # like some proxies: the 401 body quotes the header it refused
        self.deployments: dict[tuple[str, str], dict[str, Any]] = {}
        self.hpas: dict[tuple[str, str], dict[str, Any]] = {}
        self.httproutes: dict[tuple[str, str], dict[str, Any]] = {}
        self.hooks: list[tuple[str, str, Callable[[], None]]] = []  # (method, path part, run once before serving it)
        self.hpa_load: dict[tuple[str, str], int] = {}  # by HPA: the replicas its metrics ask for (see set_load)
        self.hpa_paused: set[tuple[str, str]] = set()  # HPAs whose controller does not act (a slow sync)
        self.requests: list[RecordedRequest] = []
        self.faults: list[Fault] = []
        self.unpullable_images: set[str] = set()  # pods report ImagePullBackOff, rollout never progresses
        self.invalid_images: set[str] = set()  # pods report InvalidImageName
        self.stuck: set[tuple[str, str]] = set()  # rollout makes no progress, for any image
        self._rollouts: dict[tuple[str, str], _Rollout] = {}
        self._rv = 1000
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._threads: list[threading.Thread] = []

    # -- lifecycle -----------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FakeKubeApi":
        self._threads = [
            threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-kube-http", daemon=True),
            threading.Thread(target=self._controller, name="fake-kube-controller", daemon=True),
        ]
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        for t in self._threads:
            t.join(timeout=5)

    def __enter__(self) -> "FakeKubeApi":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- test helpers --------------------------------------------------------------------------------
    def fail_next(self, count: int, status: int = 500, *, method: str | None = None, path_contains: str | None = None) -> None:
        """The next `count` requests matching method/path get `status` (5xx, 404, 403, 409...)."""
        with self._lock:
            self.faults.append(Fault(status, count, method, path_contains))

    def seed_primary(
        self, namespace: str, name: str, image: str, *, replicas: int = 2, container: str = "app",
        labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
        progress_deadline_seconds: int = 600,
    ) -> dict[str, Any]:
        """Create a Deployment that has already rolled out completely (what a cluster has before Bifrost)."""
        labels = labels or {"app.kubernetes.io/name": name}
        body = {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels), "annotations": dict(annotations or {})},
            "spec": {
                "replicas": replicas, "selector": {"matchLabels": dict(labels)},
                "progressDeadlineSeconds": progress_deadline_seconds,
                "template": {"metadata": {"labels": dict(labels)},
                             "spec": {"containers": [{"name": container, "image": image, "ports": [{"containerPort": 8080}]}]}},
            },
        }
        with self._lock:
            obj = self._create(namespace, body)
            ro = self._rollouts[(namespace, name)]
            ro.updated = ro.ready = replicas
            ro.template_hash, ro.revision = _hash(obj["spec"]["template"]), 1
            obj["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "1"
            self._write_status(obj, ro, time.monotonic())
            return copy.deepcopy(obj)

    def seed_hpa(self, namespace: str, name: str, target: str, *, min_replicas: int = 1, max_replicas: int = 10,
                 load: int | None = None) -> dict[str, Any]:
        """Create an autoscaling/v2 HPA scaling Deployment `target`; its metrics ask for `load` replicas (default:
        what the Deployment runs now)."""
        body = {
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                     "minReplicas": min_replicas, "maxReplicas": max_replicas,
                     "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                         "type": "Utilization", "averageUtilization": 70}}}]},
        }
        with self._lock:
            obj = self._create_hpa(namespace, body)
            dep = self.deployments.get((namespace, target))
            self.hpa_load[(namespace, name)] = load if load is not None else (dep["spec"]["replicas"] if dep else min_replicas)
            self._autoscale(time.monotonic())
            return copy.deepcopy(obj)

    def set_load(self, namespace: str, hpa: str, replicas: int) -> None:
        """What the HPA's metrics ask for from now on (the load changed)."""
        with self._lock:
            self.hpa_load[(namespace, hpa)] = replicas

    def get_hpa(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            obj = self.hpas.get((namespace, name))
            return copy.deepcopy(obj) if obj else None

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            obj = self.deployments.get((namespace, name))
            return copy.deepcopy(obj) if obj else None

    def image_of(self, namespace: str, name: str, container: str = "app") -> str | None:
        obj = self.get(namespace, name)
        if obj is None:
            return None
        return next((c["image"] for c in obj["spec"]["template"]["spec"]["containers"] if c["name"] == container), None)

    def touch(self, namespace: str, name: str) -> None:
        """Another writer changes the object's metadata (bumps resourceVersion, not generation)."""
        with self._lock:
            obj = self.deployments[(namespace, name)]
            obj["metadata"].setdefault("annotations", {})["other-writer/touched"] = str(time.monotonic_ns())
            obj["metadata"]["resourceVersion"] = self._next_rv()

    def before_next(self, method: str, path_contains: str, fn: Callable[[], None]) -> None:
        """Run `fn` (under the server's lock) just before serving the next matching request, once."""
        with self._lock:
            self.hooks.append((method, path_contains, fn))

    def seed_httproute(self, namespace: str, name: str, backends: list[dict[str, Any]] | list[list[dict[str, Any]]], *,
                       parent: str = "gateway") -> dict[str, Any]:
        """Create an HTTPRoute attached to Gateway `parent`: one rule with `backends` (backendRefs), or one rule per
        list when given a list of lists."""
        rules = backends if backends and isinstance(backends[0], list) else [backends]
        body = {
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"parentRefs": [{"name": parent}],
                     "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}], "backendRefs": list(r)}
                               for r in rules]},
        }
        with self._lock:
            return copy.deepcopy(self._create_httproute(namespace, body))

    def httproute(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            obj = self.httproutes.get((namespace, name))
            return copy.deepcopy(obj) if obj else None

    def edit_httproute(self, namespace: str, name: str, edit: Callable[[dict[str, Any]], None]) -> None:
        """Another writer (a person, GitOps, another controller) changes the route: `edit` mutates its spec."""
        with self._lock:
            obj = self.httproutes[(namespace, name)]
            new = copy.deepcopy(obj)
            edit(new["spec"])
            self._update_httproute(namespace, name, new, precondition=obj["metadata"]["resourceVersion"])

    def count(self, method: str, path_contains: str = "") -> int:
        with self._lock:
            return sum(1 for r in self.requests if r.method == method and path_contains in r.path)

    # -- storage -------------------------------------------------------------------------------------
    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _validate(self, obj: dict[str, Any], old: dict[str, Any] | None = None) -> None:
        name = obj.get("metadata", {}).get("name", "")
        errors = []
        if not name or not _DNS1123.match(name) or len(name) > 253:
            errors.append(f"metadata.name: Invalid value: {name!r}: must be a DNS-1123 subdomain")
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            raise ApiError(422, "Invalid", f'Deployment.apps "{name}" is invalid: spec: Required value', name)
        replicas = spec.get("replicas", 1)
        if not isinstance(replicas, int) or replicas < 0:
            errors.append(f"spec.replicas: Invalid value: {replicas!r}: must be greater than or equal to 0")
        selector = (spec.get("selector") or {}).get("matchLabels") or {}
        if not selector and not (spec.get("selector") or {}).get("matchExpressions"):
            errors.append("spec.selector: Required value")
        template = spec.get("template") or {}
        tlabels = (template.get("metadata") or {}).get("labels") or {}
        if any(tlabels.get(k) != v for k, v in selector.items()):
            errors.append("spec.template.metadata.labels: Invalid value: `selector` does not match template `labels`")
        containers = (template.get("spec") or {}).get("containers") or []
        if not containers:
            errors.append("spec.template.spec.containers: Required value")
        seen = set()
        for i, c in enumerate(containers):
            if not c.get("name"):
                errors.append(f"spec.template.spec.containers[{i}].name: Required value")
            if c.get("name") in seen:
                errors.append(f"spec.template.spec.containers[{i}].name: Duplicate value: {c.get('name')!r}")
            seen.add(c.get("name"))
            image = c.get("image")
            if not image:
                errors.append(f"spec.template.spec.containers[{i}].image: Required value")
            elif image != image.strip():
                errors.append(f"spec.template.spec.containers[{i}].image: Invalid value: {image!r}: must not have leading or trailing whitespace")
        if old is not None and old["spec"].get("selector") != spec.get("selector"):
            errors.append("spec.selector: Invalid value: field is immutable")
        if errors:
            raise ApiError(422, "Invalid", f'Deployment.apps "{name}" is invalid: ' + ", ".join(errors), name)

    def _defaults(self, obj: dict[str, Any]) -> None:
        spec = obj["spec"]
        spec.setdefault("replicas", 1)
        spec.setdefault("progressDeadlineSeconds", 600)
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("strategy", {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
        for c in spec["template"]["spec"]["containers"]:
            c.setdefault("imagePullPolicy", "IfNotPresent")
            c.setdefault("terminationMessagePath", "/dev/termination-log")
        spec["template"].setdefault("metadata", {})
        obj["apiVersion"], obj["kind"] = "apps/v1", "Deployment"
        obj.setdefault("status", {})

    def _create(self, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        def prepare(obj: dict[str, Any], name: str) -> None:
            self._validate(obj)
            self._defaults(obj)
            obj["metadata"].setdefault("labels", {})

        obj = self._insert(self.deployments, "deployments.apps", ns, body, prepare=prepare, status={})
        self._rollouts[(ns, obj["metadata"]["name"])] = _Rollout(last_progress=time.monotonic())
        return obj

    def _update(self, ns: str, name: str, new: dict[str, Any], *, precondition: str | None) -> dict[str, Any]:
        def prepare(obj: dict[str, Any], old: dict[str, Any]) -> None:
            self._validate(obj, old)
            self._defaults(obj)
            obj["metadata"].setdefault("labels", {})

        return self._replace(self.deployments, "deployments.apps", ns, name, new, precondition=precondition,
                             prepare=prepare)

    def _insert(self, store: dict[tuple[str, str], dict[str, Any]], resource: str, ns: str, body: dict[str, Any], *,
                prepare: Callable[[dict[str, Any], str], None], status: dict[str, Any], group: str = "apps",
                kind: str = "deployments") -> dict[str, Any]:
        """A POST as the apiserver answers it: the namespace from the URL (400 when the body names another),
        `prepare` validates (422) and defaults the object, 409 when the name exists; the server owns uid,
        creationTimestamp, generation, resourceVersion and the initial status."""
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", ns)
        if meta["namespace"] != ns:
            raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the namespace sent "
                           "on the request", group=group, kind=kind)
        name = meta.get("name", "")
        prepare(obj, name)
        if (ns, name) in store:
            raise ApiError(409, "AlreadyExists", f'{resource} "{name}" already exists', name, group=group, kind=kind)
        meta.pop("resourceVersion", None)
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1, resourceVersion=self._next_rv())
        obj["status"] = status
        store[(ns, name)] = obj
        return obj

    def _replace(self, store: dict[tuple[str, str], dict[str, Any]], resource: str, ns: str, name: str,
                 new: dict[str, Any], *, precondition: str | None,
                 prepare: Callable[[dict[str, Any], dict[str, Any]], None]) -> dict[str, Any]:
        """A PUT of a stored object as the apiserver answers it: 404, a name that does not match the URL, the
        resourceVersion precondition (409); `prepare` validates and defaults the new object; the server-owned
        metadata stays, the generation counts spec changes, status writes are ignored, a no-op keeps its version."""
        old = store.get((ns, name))
        if old is None:
            raise ApiError(404, "NotFound", f'{resource} "{name}" not found', name)
        if new.get("metadata", {}).get("name", name) != name:
            raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL", name)
        if precondition is not None and precondition != old["metadata"]["resourceVersion"]:
            raise ApiError(
                409, "Conflict",
                f'Operation cannot be fulfilled on {resource} "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again", name,
            )
        obj = copy.deepcopy(new)
        obj.setdefault("metadata", {})["name"] = name
        prepare(obj, old)
        meta = obj["metadata"]
        for key in ("uid", "creationTimestamp", "namespace"):
            meta[key] = old["metadata"][key]
        meta["generation"] = old["metadata"]["generation"] + (1 if obj["spec"] != old["spec"] else 0)
        obj["status"] = old["status"]  # the main resource ignores status writes
        meta["resourceVersion"] = old["metadata"]["resourceVersion"]
        if obj != old:  # a no-op write keeps the resourceVersion, like the real apiserver
            meta["resourceVersion"] = self._next_rv()
        store[(ns, name)] = obj
        return obj

    # -- HTTPRoutes (gateway.networking.k8s.io/v1, a custom resource) ---------------------------------------
    def _validate_httproute(self, obj: dict[str, Any], name: str) -> None:
        """The checks the HTTPRoute CRD's OpenAPI schema makes on what Bifrost writes: names, rules, backendRef weights."""
        spec = obj.get("spec")
        invalid = f'HTTPRoute.gateway.networking.k8s.io "{name}" is invalid: '
        if not isinstance(spec, dict):
            raise ApiError(422, "Invalid", invalid + "spec: Required value", name, group="gateway.networking.k8s.io",
                           kind="httproutes")
        errors = []
        if not _DNS1123.match(obj.get("metadata", {}).get("name", "")):
            errors.append("metadata.name: Invalid value: must be a DNS-1123 subdomain")
        rules = spec.get("rules") or []
        if len(rules) > 16:
            errors.append(f"spec.rules: Too many: {len(rules)}: must have at most 16 items")
        for i, rule in enumerate(rules):
            refs = rule.get("backendRefs") or []
            if len(refs) > 16:
                errors.append(f"spec.rules[{i}].backendRefs: Too many: {len(refs)}: must have at most 16 items")
            for j, ref in enumerate(refs):
                if not ref.get("name"):
                    errors.append(f"spec.rules[{i}].backendRefs[{j}].name: Required value")
                weight = ref.get("weight", 1)
                if not isinstance(weight, int) or isinstance(weight, bool) or not 0 <= weight <= 1000000:
                    errors.append(f"spec.rules[{i}].backendRefs[{j}].weight: Invalid value: {weight!r}: "
                                  "should be between 0 and 1000000")
        if errors:
            raise ApiError(422, "Invalid", invalid + ", ".join(errors), name, group="gateway.networking.k8s.io",
                           kind="httproutes")

    def _create_httproute(self, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        def prepare(obj: dict[str, Any], name: str) -> None:
            self._validate_httproute(obj, name)
            obj["apiVersion"], obj["kind"] = "gateway.networking.k8s.io/v1", "HTTPRoute"

        return self._insert(self.httproutes, "httproutes.gateway.networking.k8s.io", ns, body, prepare=prepare,
                            status={"parents": []}, group="gateway.networking.k8s.io", kind="httproutes")

    def _update_httproute(self, ns: str, name: str, new: dict[str, Any], *, precondition: str | None) -> dict[str, Any]:
        def prepare(obj: dict[str, Any], old: dict[str, Any]) -> None:
            self._validate_httproute(obj, name)
            obj["apiVersion"], obj["kind"] = "gateway.networking.k8s.io/v1", "HTTPRoute"

        try:
            return self._replace(self.httproutes, "httproutes.gateway.networking.k8s.io", ns, name, new,
                                 precondition=precondition, prepare=prepare)
        except ApiError as err:
            err.group, err.kind = "gateway.networking.k8s.io", "httproutes"
            raise

    def _serve_httproute(self, method: str, ns: str, name: str | None, status: bool, ctype: str,
                         body: Any) -> tuple[int, dict[str, Any]]:
        group = "gateway.networking.k8s.io"
        if name is None:
            if method == "GET":
                items = [copy.deepcopy(o) for (n, _), o in sorted(self.httproutes.items()) if n == ns]
                return 200, {"apiVersion": f"{group}/v1", "kind": "HTTPRouteList",
                             "metadata": {"resourceVersion": str(self._rv)}, "items": items}
            if method == "POST":
                return 201, copy.deepcopy(self._create_httproute(ns, body or {}))
            raise ApiError(405, "MethodNotAllowed", f"{method} not allowed on a collection")
        if status:
            raise ApiError(405, "MethodNotAllowed", "the fake apiserver serves status only through the main resource")
        current = self.httproutes.get((ns, name))
        if current is None and method in ("GET", "PUT", "PATCH", "DELETE"):
            raise ApiError(404, "NotFound", f'httproutes.{group} "{name}" not found', name, group=group, kind="httproutes")
        assert current is not None
        if method == "GET":
            return 200, copy.deepcopy(current)
        if method == "PUT":
            precondition = (body or {}).get("metadata", {}).get("resourceVersion")
            if not precondition:  # custom resources allow no unconditional update
                raise ApiError(422, "Invalid", f'HTTPRoute.{group} "{name}" is invalid: metadata.resourceVersion: '
                               "Invalid value: 0x0: must be specified for an update", name, group=group, kind="httproutes")
            return 200, copy.deepcopy(self._update_httproute(ns, name, body or {}, precondition=precondition))
        if method == "PATCH":
            if ctype == "application/strategic-merge-patch+json":
                raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - accepted "
                               "media types include: application/json-patch+json, application/merge-patch+json, "
                               "application/apply-patch+yaml")
            new, precondition = _patched(current, body, ctype)
            if precondition is None:
                new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            return 200, copy.deepcopy(self._update_httproute(ns, name, new, precondition=precondition))
        if method == "DELETE":
            del self.httproutes[(ns, name)]
            return 200, {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success",
                         "details": {"name": name, "group": group, "kind": "httproutes"}}
        raise ApiError(405, "MethodNotAllowed", f"{method} not allowed")

    # -- HorizontalPodAutoscalers -------------------------------------------------------------------------
    def _validate_hpa(self, obj: dict[str, Any], name: str) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            raise ApiError(422, "Invalid", f'HorizontalPodAutoscaler.autoscaling "{name}" is invalid: spec: Required value', name)
        errors = []
        meta_name = obj.get("metadata", {}).get("name", "")
        if not meta_name or not _DNS1123.match(meta_name):
            errors.append(f"metadata.name: Invalid value: {meta_name!r}: must be a DNS-1123 subdomain")
        ref = spec.get("scaleTargetRef") or {}
        if not ref.get("kind"):
            errors.append("spec.scaleTargetRef.kind: Required value")
        if not ref.get("name"):
            errors.append("spec.scaleTargetRef.name: Required value")
        low, high = spec.get("minReplicas", 1), spec.get("maxReplicas")
        if not isinstance(low, int) or isinstance(low, bool) or low < 1:
            errors.append(f"spec.minReplicas: Invalid value: {low!r}: must be greater than or equal to 1")
        if not isinstance(high, int) or isinstance(high, bool) or high < 1:
            errors.append(f"spec.maxReplicas: Invalid value: {high!r}: must be greater than 0")
        elif isinstance(low, int) and high < low:
            errors.append(f"spec.maxReplicas: Invalid value: {high}: must be greater than or equal to `minReplicas`")
        if errors:
            raise ApiError(422, "Invalid", f'HorizontalPodAutoscaler.autoscaling "{name}" is invalid: ' + ", ".join(errors), name)

    @staticmethod
    def _hpa_defaults(obj: dict[str, Any]) -> None:
        obj["spec"].setdefault("minReplicas", 1)
        obj["apiVersion"], obj["kind"] = "autoscaling/v2", "HorizontalPodAutoscaler"

    def _create_hpa(self, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        def prepare(obj: dict[str, Any], name: str) -> None:
            self._validate_hpa(obj, name)
            self._hpa_defaults(obj)

        return self._insert(self.hpas, "horizontalpodautoscalers.autoscaling", ns, body, prepare=prepare,
                            status={"currentReplicas": 0, "desiredReplicas": 0})

    def _update_hpa(self, ns: str, name: str, new: dict[str, Any], *, precondition: str | None) -> dict[str, Any]:
        def prepare(obj: dict[str, Any], old: dict[str, Any]) -> None:
            self._validate_hpa(obj, name)
            self._hpa_defaults(obj)

        return self._replace(self.hpas, "horizontalpodautoscalers.autoscaling", ns, name, new,
                             precondition=precondition, prepare=prepare)

    def _autoscale(self, now: float) -> None:
        """The HPA controller: each target Deployment runs its load's replicas, bounded by [minReplicas, maxReplicas]."""
        for key, hpa in self.hpas.items():
            if key in self.hpa_paused:
                continue
            ns = key[0]
            spec = hpa["spec"]
            ref = spec["scaleTargetRef"]
            dep = self.deployments.get((ns, ref["name"])) if ref.get("kind") == "Deployment" else None
            if dep is None:
                continue
            want = min(max(self.hpa_load.get(key, dep["spec"]["replicas"]), spec.get("minReplicas", 1)), spec["maxReplicas"])
            status = {"currentReplicas": dep["spec"]["replicas"], "desiredReplicas": want,
                      "lastScaleTime": hpa["status"].get("lastScaleTime")}
            if dep["spec"]["replicas"] != want:
                dep["spec"]["replicas"] = want
                dep["metadata"]["generation"] += 1
                dep["metadata"]["resourceVersion"] = self._next_rv()
                status["lastScaleTime"] = _now()
            status = {k: v for k, v in status.items() if v is not None}
            if status != hpa["status"]:
                hpa["status"] = status
                hpa["metadata"]["resourceVersion"] = self._next_rv()

    # -- controller ----------------------------------------------------------------------------------
    def _controller(self) -> None:
        while not self._stop.wait(self.tick_seconds):
            with self._lock:
                now = time.monotonic()
                self._autoscale(now)
                for key, obj in self.deployments.items():
                    self._tick(key, obj, now)

    def _tick(self, key: tuple[str, str], obj: dict[str, Any], now: float) -> None:
        ro = self._rollouts[key]
        spec = obj["spec"]
        want = spec["replicas"]
        status = obj["status"]
        before = copy.deepcopy(status)
        generation = obj["metadata"]["generation"]
        if status.get("observedGeneration") != generation:
            thash = _hash(spec["template"])
            if thash != ro.template_hash:  # a new ReplicaSet; pods of the old template keep serving until replaced
                if ro.template_hash:
                    ro.old_replicas = min(want, ro.ready + ro.old_replicas)
                ro.template_hash = thash
                ro.updated = ro.ready = 0
                ro.revision += 1
                ro.deadline_exceeded = False
                obj["metadata"].setdefault("annotations", {})["deployment.kubernetes.io/revision"] = str(ro.revision)
            ro.last_progress = now
            status["observedGeneration"] = generation
        images = [c["image"] for c in spec["template"]["spec"]["containers"]]
        blocked = key in self.stuck or any(i in self.unpullable_images or i in self.invalid_images for i in images)
        if blocked:
            ro.updated = max(ro.updated, min(want, 1))  # one new pod exists but never becomes ready
        else:
            progressed = True
            if ro.updated > want:
                ro.updated, ro.ready = want, min(ro.ready, want)
            elif ro.ready < ro.updated:
                ro.ready = ro.updated  # pods become ready one tick after they are created
            elif ro.updated < want:
                ro.updated += 1
            else:
                progressed = False
            if ro.old_replicas > 0:
                ro.old_replicas = max(0, min(ro.old_replicas, want - ro.ready))
                progressed = True
            if progressed:
                ro.last_progress = now
        complete = ro.updated == want and ro.ready == want and ro.old_replicas == 0
        if not complete and now - ro.last_progress > spec["progressDeadlineSeconds"]:
            ro.deadline_exceeded = True
        self._write_status(obj, ro, now)
        if status != before:
            obj["metadata"]["resourceVersion"] = self._next_rv()

    def _write_status(self, obj: dict[str, Any], ro: _Rollout, now: float) -> None:
        spec, status = obj["spec"], obj["status"]
        want = spec["replicas"]
        total = ro.updated + ro.old_replicas
        available = min(ro.ready + ro.old_replicas, total)
        status.update(
            observedGeneration=obj["metadata"]["generation"], replicas=total, updatedReplicas=ro.updated,
            readyReplicas=available, availableReplicas=available, unavailableReplicas=max(0, want - available),
        )
        for k in ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas", "unavailableReplicas"):
            if status[k] == 0:
                del status[k]  # the real API omits zero counts
        complete = ro.updated == want and ro.ready == want and ro.old_replicas == 0
        conds = {c["type"]: c for c in status.get("conditions", [])}
        if complete:
            prog = ("True", "NewReplicaSetAvailable", f'ReplicaSet "{obj["metadata"]["name"]}" has successfully progressed.')
        elif ro.deadline_exceeded:
            prog = ("False", "ProgressDeadlineExceeded", f'ReplicaSet "{obj["metadata"]["name"]}" has timed out progressing.')
        else:
            prog = ("True", "ReplicaSetUpdated", f'ReplicaSet "{obj["metadata"]["name"]}" is progressing.')
        max_unavailable = want // 4
        avail = ("True", "MinimumReplicasAvailable", "Deployment has minimum availability.") if available >= want - max_unavailable \
            else ("False", "MinimumReplicasUnavailable", "Deployment does not have minimum availability.")
        out = []
        for ctype, (cstatus, reason, message) in (("Available", avail), ("Progressing", prog)):
            old = conds.get(ctype, {})
            same = old.get("status") == cstatus and old.get("reason") == reason
            out.append({
                "type": ctype, "status": cstatus, "reason": reason, "message": message,
                "lastUpdateTime": old.get("lastUpdateTime", _now()) if same else _now(),
                "lastTransitionTime": old.get("lastTransitionTime", _now()) if old.get("status") == cstatus else _now(),
            })
        status["conditions"] = out

    def _pods(self, ns: str, selector: str | None) -> list[dict[str, Any]]:
        pods = []
        for (dns, name), obj in self.deployments.items():
            if dns != ns:
                continue
            ro = self._rollouts[(dns, name)]
            tmpl = obj["spec"]["template"]
            labels = {**(tmpl["metadata"].get("labels") or {}), "pod-template-hash": ro.template_hash}
            if not _selector_matches(selector, labels):
                continue
            for i in range(ro.updated):
                statuses = []
                for c in tmpl["spec"]["containers"]:
                    ready = i < ro.ready
                    if c["image"] in self.invalid_images:
                        state = {"waiting": {"reason": "InvalidImageName", "message": f'Failed to apply default image tag "{c["image"]}"'}}
                    elif c["image"] in self.unpullable_images:
                        state = {"waiting": {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{c["image"]}"'}}
                    elif ready:
                        state = {"running": {"startedAt": _now()}}
                    else:
                        state = {"waiting": {"reason": "ContainerCreating"}}
                    statuses.append({"name": c["name"], "image": c["image"], "imageID": "", "ready": ready and "running" in state,
                                     "restartCount": 0, "state": state})
                pods.append({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"{name}-{ro.template_hash}-{i}", "namespace": ns, "labels": labels},
                    "spec": {"containers": [{"name": c["name"], "image": c["image"]} for c in tmpl["spec"]["containers"]]},
                    "status": {"phase": "Running" if all(s["ready"] for s in statuses) else "Pending", "containerStatuses": statuses},
                })
        return pods

    # -- HTTP ----------------------------------------------------------------------------------------
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # Headers and body go out in two writes; without this, Nagle + delayed ACK add ~40 ms per request.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, *args: object) -> None:
                pass

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                url = urlparse(self.path)
                ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
                with fake._lock:
                    fake.requests.append(RecordedRequest(method, url.path, ctype, self.headers.get("Authorization") or ""))
                try:
                    code, body = fake._serve(method, url.path, parse_qs(url.query), ctype, raw, self.headers.get("Authorization"))
                except ApiError as err:
                    code, body = err.code, _status(err)
                except Exception as err:  # a bug in the fake must show up as a 500, not a hung client
                    code, body = 500, _status(ApiError(500, "InternalError", f"fake apiserver error: {err!r}"))
                self._send(code, body)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_PUT(self) -> None:
                self._handle("PUT")

            def do_PATCH(self) -> None:
                self._handle("PATCH")

            def do_DELETE(self) -> None:
                self._handle("DELETE")

        return Handler

    def _serve(self, method: str, path: str, query: dict[str, list[str]], ctype: str, raw: bytes,
               auth: str | None) -> tuple[int, dict[str, Any]]:
        with self._lock:
            if self.token is not None and auth != f"Bearer {self.token}":
                raise ApiError(401, "Unauthorized", f"Unauthorized: rejected Authorization: {auth}"
                               if self.echo_auth_in_401 else "Unauthorized")
            for fault in self.faults:
                if fault.remaining > 0 and fault.matches(method, path):
                    fault.remaining -= 1
                    reason = {403: "Forbidden", 404: "NotFound", 409: "Conflict", 422: "Invalid", 429: "TooManyRequests"}.get(
                        fault.status, "InternalError")
                    raise ApiError(fault.status, reason, f"injected fault: HTTP {fault.status} for {method} {path}")
            self.faults = [f for f in self.faults if f.remaining > 0]
            body = json.loads(raw) if raw else None
            selector = (query.get("labelSelector") or [None])[0]
            if "watch" in query:
                raise ApiError(405, "MethodNotAllowed", "the fake apiserver does not implement watch")
            m = _PODS.match(path)
            if m and method == "GET":
                return 200, {"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": str(self._rv)},
                             "items": self._pods(m["ns"], selector)}
            for hook in list(self.hooks):
                if hook[0] == method and hook[1] in path:
                    self.hooks.remove(hook)
                    hook[2]()  # e.g. another writer changing the object between a client's read and its write
            m = _HTTPROUTES.match(path)
            if m:
                return self._serve_httproute(method, m["ns"], m["name"], bool(m["status"]), ctype, body)
            m = _HPAS.match(path)
            if m:
                return self._serve_hpa(method, m["ns"], m["name"], bool(m["status"]), ctype, body)
            m = _DEPLOYMENTS.match(path)
            if not m:
                raise ApiError(404, "NotFound", f"the server could not find the requested resource ({method} {path})")
            ns, name = m["ns"], m["name"]
            if name is None:
                if method == "GET":
                    items = [copy.deepcopy(o) for (n, _), o in sorted(self.deployments.items())
                             if n == ns and _selector_matches(selector, o["metadata"].get("labels") or {})]
                    return 200, {"apiVersion": "apps/v1", "kind": "DeploymentList",
                                 "metadata": {"resourceVersion": str(self._rv)}, "items": items}
                if method == "POST":
                    return 201, copy.deepcopy(self._create(ns, body or {}))
                raise ApiError(405, "MethodNotAllowed", f"{method} not allowed on a collection")
            if m["status"]:
                raise ApiError(405, "MethodNotAllowed", "the fake apiserver serves status only through the main resource")
            current = self.deployments.get((ns, name))
            if method == "GET":
                if current is None:
                    raise ApiError(404, "NotFound", f'deployments.apps "{name}" not found', name)
                return 200, copy.deepcopy(current)
            if method == "PUT":
                precondition = (body or {}).get("metadata", {}).get("resourceVersion")
                return 200, copy.deepcopy(self._update(ns, name, body or {}, precondition=precondition))
            if method == "PATCH":
                if current is None:
                    raise ApiError(404, "NotFound", f'deployments.apps "{name}" not found', name)
                new, precondition = _patched(current, body, ctype)
                if precondition is None:
                    new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                return 200, copy.deepcopy(self._update(ns, name, new, precondition=precondition))
            if method == "DELETE":
                if current is None:
                    raise ApiError(404, "NotFound", f'deployments.apps "{name}" not found', name)
                del self.deployments[(ns, name)]
                del self._rollouts[(ns, name)]
                return 200, {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success",
                             "details": {"name": name, "group": "apps", "kind": "deployments", "uid": current["metadata"]["uid"]}}
            raise ApiError(405, "MethodNotAllowed", f"{method} not allowed")

    def _serve_hpa(self, method: str, ns: str, name: str | None, status: bool, ctype: str,
                   body: Any) -> tuple[int, dict[str, Any]]:
        if name is None:
            if method == "GET":
                items = [copy.deepcopy(o) for (n, _), o in sorted(self.hpas.items()) if n == ns]
                return 200, {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscalerList",
                             "metadata": {"resourceVersion": str(self._rv)}, "items": items}
            if method == "POST":
                return 201, copy.deepcopy(self._create_hpa(ns, body or {}))
            raise ApiError(405, "MethodNotAllowed", f"{method} not allowed on a collection")
        if status:
            raise ApiError(405, "MethodNotAllowed", "the fake apiserver serves status only through the main resource")
        current = self.hpas.get((ns, name))
        missing = ApiError(404, "NotFound", f'horizontalpodautoscalers.autoscaling "{name}" not found', name)
        if method == "GET":
            if current is None:
                raise missing
            return 200, copy.deepcopy(current)
        if method == "PUT":
            precondition = (body or {}).get("metadata", {}).get("resourceVersion")
            return 200, copy.deepcopy(self._update_hpa(ns, name, body or {}, precondition=precondition))
        if method == "PATCH":
            if current is None:
                raise missing
            new, precondition = _patched(current, body, ctype)
            if precondition is None:
                new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            return 200, copy.deepcopy(self._update_hpa(ns, name, new, precondition=precondition))
        if method == "DELETE":
            if current is None:
                raise missing
            del self.hpas[(ns, name)]
            self.hpa_load.pop((ns, name), None)
            return 200, {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success",
                         "details": {"name": name, "group": "autoscaling", "kind": "horizontalpodautoscalers"}}
        raise ApiError(405, "MethodNotAllowed", f"{method} not allowed")


def _patched(current: dict[str, Any], body: Any, ctype: str) -> tuple[dict[str, Any], str | None]:
    """The object after a PATCH of content type `ctype`, and the resourceVersion precondition the patch carries."""
    if ctype == "application/strategic-merge-patch+json":
        return strategic_merge_patch(current, body), (body or {}).get("metadata", {}).get("resourceVersion")
    if ctype == "application/merge-patch+json":
        return merge_patch(current, body), (body or {}).get("metadata", {}).get("resourceVersion")
    if ctype == "application/json-patch+json":
        return json_patch(current, body or []), None
    raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - accepted media types include: "
                   "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json")


def _status(err: ApiError) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": err.message, "reason": err.reason, "code": err.code}
    if err.name:
        body["details"] = {"name": err.name, "group": err.group, "kind": err.kind}
    return body
