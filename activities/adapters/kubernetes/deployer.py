"""Kubernetes deployer on the official `kubernetes` client: canary and baseline Deployments beside the primary,
and the floor of a HorizontalPodAutoscaler (autoscaling/v2) that scales the primary.

Every step reads the cluster first and converges to the wanted state, so a retried activity repeats
nothing harmful. Writes carry the read `resourceVersion`; a 409 re-reads and tries again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from temporalio import activity

from activities.adapters.base import Autoscaler, DeployError, http_status, one_line
from activities.adapters.kubernetes.manifests import (
    FATAL_WAITING,
    PREVIOUS_TEMPLATE_ANNOTATION,
    PREVIOUS_VERSION_ANNOTATION,
    PULL_WAITING,
    ROLE_LABEL,
    ROLLED_BACK_FROM_ANNOTATION,
    SPEC_HASH_ANNOTATION,
    check_image,
    container_index,
    image_patch,
    manifest_image,
    promote_annotations,
    restored_primary,
    role_manifest,
    rollout_state,
    version_of,
)
from activities.adapters.lazy import LazyClient
from activities.adapters.retry import Backoff, retrying
from activities.adapters.secrets import resolve_secret
from common.types import Role, StageRef

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class KubeSettings:
    """Where the primary lives and how patient to be; `{service}` in namespace/workload is the service name."""

    namespace: str
    workload: str = "{service}"
    container: str | None = None  # the container whose image changes; default: the first one
    progress_deadline_seconds: float = 600.0
    poll_seconds: float = 1.0
    request_timeout_seconds: float = 30.0
    max_attempts: int = 5  # per API call on 5xx/connection errors, and per step on 409 conflicts
    backoff_seconds: float = 0.5
    image_pull_grace_seconds: float = 120.0  # ImagePullBackOff this long fails the deploy as a bad image


Verb = Literal["get", "list", "create", "update", "patch", "delete"]


@dataclass(frozen=True)
class KubeRequest:
    """One API request, named the way RBAC names it: verb, resource, namespace and object name."""

    verb: Verb
    resource: str
    namespace: str
    name: str | None = None

    def __str__(self) -> str:
        where = f"{self.resource}/{self.namespace}" + (f"/{self.name}" if self.name else "")
        return f"{self.verb.upper()} {where}"


class _Conflict(Exception):
    """A write lost a race (HTTP 409); the step re-reads and tries again."""

    def __init__(self, req: KubeRequest, detail: str) -> None:
        super().__init__(f"{req}: {detail}")
        self.req, self.detail = req, detail


def _heartbeat(*details: object) -> None:
    """Heartbeat when running inside a Temporal activity, so long waits are not mistaken for a dead worker."""
    if activity.in_activity():
        activity.heartbeat(*details)


def _status_message(err: ApiException) -> str:
    """The API server's own explanation from its Status body (message, else reason and causes), or the HTTP reason.

    Never the client's own rendering of the exception, which carries the response headers."""
    try:
        body = json.loads(err.body or "{}")
    except (ValueError, TypeError):
        body = None
    if not isinstance(body, dict):
        return one_line(err.body or err.reason or "")
    if body.get("message"):
        return one_line(body["message"])
    causes = ((body.get("details") or {}).get("causes") or []) if isinstance(body.get("details"), dict) else []
    parts = [f"{c.get('field', '')}: {c.get('message', '')}".strip(": ") for c in causes if isinstance(c, dict)]
    return one_line("; ".join(p for p in parts if p) or body.get("reason") or err.reason or "")


def _transport_text(err: BaseException) -> str:
    """A connection error's reason without urllib3's object reprs ("<...HTTPConnection object at 0x...>: ")."""
    reason = getattr(err, "reason", None) or err
    return one_line(re.sub(r"<[^<>]* object at 0x[0-9a-fA-F]+>:?\s*", "", str(reason)) or type(err).__name__)


def kube_status_error(failed: str, req: KubeRequest, err: ApiException, *, attempts: int = 1) -> DeployError:
    """The one-line DeployError for an API answer: what failed, the HTTP status, the request, the server's words, what to do."""
    status = err.status or 0
    retryable = status == 429 or status >= 500
    hint = _hint(status, req)
    if retryable and attempts > 1:
        hint = f"still failing after {attempts} attempts; {hint}"
    return DeployError(failed, target=str(req), status=http_status(status) if status else "client error",
                       detail=_status_message(err), hint=hint, retryable=retryable)


def kube_transport_error(failed: str, req: KubeRequest, err: BaseException, *, attempts: int, timeout: float) -> DeployError:
    """The one-line DeployError for a request that got no answer (connection refused, TLS, timeout)."""
    reason = getattr(err, "reason", None) or err
    # NewConnectionError subclasses urllib3's ConnectTimeoutError, yet it means "refused", not "slow".
    timed_out = (isinstance(reason, (TimeoutError, urllib3.exceptions.TimeoutError))
                 and not isinstance(reason, urllib3.exceptions.NewConnectionError))
    status = f"no answer within {timeout:g}s" if timed_out else "connection failed"
    return DeployError(
        failed, target=str(req), status=status, detail=_transport_text(err),
        hint=f"cannot reach the Kubernetes API server ({attempts} attempts); check api_url or the kube context in the "
             "targets file and the network from the worker; the activity will be retried",
        retryable=True,
    )


def kube_api_client(
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    api_url: str | None = None,
    token_env: str | None = None,
    verify_tls: bool = True,
    ca_file: str | None = None,
) -> k8s.ApiClient:
    """An ApiClient for a kubeconfig context, or for an explicit API URL with an optional bearer token from the env."""
    if api_url:
        conf = k8s.Configuration(host=api_url.rstrip("/"))
        conf.verify_ssl = verify_tls
        if ca_file:
            conf.ssl_ca_cert = ca_file
        if token_env:
            conf.api_key = {"BearerToken": resolve_secret(token_env, f"Kubernetes API {api_url}")}
            conf.api_key_prefix = {"BearerToken": "Bearer"}
        return k8s.ApiClient(conf)
    from kubernetes import config as kube_config

    return kube_config.new_client_from_config(config_file=kubeconfig, context=context, persist_config=False)


class KubernetesDeployer:
    """Deployer for one cluster namespace: `<workload>` is the primary, `<workload>-canary|-baseline` run beside it."""

    def __init__(self, client_factory: Callable[[], k8s.ApiClient], settings: KubeSettings) -> None:
        self.settings = settings
        self._client = LazyClient(client_factory, "Kubernetes", error=DeployError,
                                  hint="check kubeconfig/context or api_url in the targets file")
        self._warned: set[tuple[str, str | None]] = set()

    # -- plumbing ----------------------------------------------------------------------------------
    def _api_client(self) -> k8s.ApiClient:
        return self._client.get()

    def _apps(self) -> k8s.AppsV1Api:
        return k8s.AppsV1Api(self._api_client())

    def _autoscaling(self) -> k8s.AutoscalingV2Api:
        return k8s.AutoscalingV2Api(self._api_client())

    def _core(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(self._api_client())

    def _where(self, stage: StageRef) -> tuple[str, str]:
        s = self.settings
        return s.namespace.replace("{service}", stage.service), s.workload.replace("{service}", stage.service)

    async def _call(self, failed: str, req: KubeRequest, fn: Callable[..., T], *args: Any, missing_ok: bool = False,
                    **kwargs: Any) -> T | None:
        """One API call in a thread: retries 5xx/429/connection errors, maps the rest to DeployError or _Conflict.

        `failed` says what Bifrost was doing ("could not deploy the canary ..."), `req` which request it was."""
        s = self.settings
        kwargs["_request_timeout"] = s.request_timeout_seconds

        async def call() -> T | None:
            try:
                return await asyncio.to_thread(fn, *args, **kwargs)
            except ApiException as err:
                if err.status == 404 and missing_ok:
                    return None
                raise

        def failure(err: Exception, attempt: int) -> DeployError:
            if isinstance(err, ApiException):
                if err.status == 409:
                    raise _Conflict(req, _status_message(err)) from err
                return kube_status_error(failed, req, err, attempts=attempt)  # 429 and 5xx are retryable
            return kube_transport_error(failed, req, err, attempts=attempt, timeout=s.request_timeout_seconds)

        return await retrying(call, retry_on=(ApiException, urllib3.exceptions.HTTPError, OSError), failure=failure,
                              backoff=Backoff(attempts=s.max_attempts, first_seconds=s.backoff_seconds),
                              note=lambda last, attempt, _: f"{req}: {last.status}; retry {attempt}")

    async def _converge(self, failed: str, step: Callable[[], Awaitable[T]]) -> T:
        """Run a read-modify-write step until it does not lose a race."""
        s = self.settings
        last: _Conflict | None = None
        for attempt in range(1, s.max_attempts + 1):
            try:
                return await step()
            except _Conflict as err:
                last = err
                log.info("%s: conflict on %s (%s), re-reading (attempt %d)", failed, err.req, err.detail, attempt)
                _heartbeat(f"{err.req}: conflict, retry {attempt}")
                if attempt < s.max_attempts:
                    await asyncio.sleep(s.backoff_seconds * attempt / 4)
        assert last is not None
        raise DeployError(
            failed, target=str(last.req), status=http_status(409), detail=last.detail,
            hint=f"the object kept changing under Bifrost ({s.max_attempts} conflicts in a row): another controller or "
                 "person is editing it; the activity will be retried",
            retryable=True,
        ) from last

    async def _read(self, failed: str, ns: str, name: str) -> k8s.V1Deployment | None:
        return await self._call(failed, KubeRequest("get", "deployments", ns, name), self._apps().read_namespaced_deployment,
                                name, ns, missing_ok=True)

    async def _read_primary(self, failed: str, ns: str, name: str) -> k8s.V1Deployment:
        dep = await self._read(failed, ns, name)
        if dep is None:
            raise DeployError(
                failed, status=f"primary Deployment {ns}/{name} not found",
                hint="Bifrost deploys beside an existing primary: create it first, or fix namespace/workload in the "
                     "targets file",
                retryable=False,
            )
        return dep

    def _container(self, dep: k8s.V1Deployment) -> int:
        return container_index(dep, self.settings.container)

    def version_of(self, dep: k8s.V1Deployment) -> str | None:
        """The version a Deployment runs (see `manifests.version_of`)."""
        return version_of(dep, self._container(dep))

    def _as_dict(self, obj: object) -> dict[str, Any]:
        serialized: dict[str, Any] = self._api_client().sanitize_for_serialization(obj)
        return serialized

    # -- waiting -----------------------------------------------------------------------------------
    async def _wait_rollout(self, failed: str, purpose: str, ns: str, name: str, image: str | None) -> None:
        """Poll until the rollout completes; fail on ProgressDeadlineExceeded, unpullable images or our own deadline."""
        s = self.settings
        loop = asyncio.get_running_loop()
        # A little past the server's own progress deadline, so its ProgressDeadlineExceeded (more telling) wins; at
        # least 2 s past, since the server counts from when its controller saw the change, which can lag our start.
        margin = min(30.0, max(2 * s.poll_seconds, s.progress_deadline_seconds / 2, 2.0))
        deadline = loop.time() + s.progress_deadline_seconds + margin
        pull_since: float | None = None
        target = f"deployments/{ns}/{name}"
        describe = f"inspect with `kubectl -n {ns} describe deployment {name}`"
        while True:
            dep = await self._read(failed, ns, name)
            if dep is None:
                raise DeployError(failed, target=target, status="deleted during its rollout",
                                  hint="something else removed it; the activity will be retried and recreate it",
                                  retryable=True)
            state, detail = rollout_state(dep)
            _heartbeat(f"{purpose}: {ns}/{name}: {detail}")
            if state == "complete":
                return
            if state == "failed":
                raise DeployError(failed, target=target, status="rollout failed", detail=detail, hint=describe,
                                  retryable=False)
            if image is not None:
                problem = await self._image_problem(failed, ns, dep, image)
                if problem is not None:
                    fatal, text = problem
                    pull_since = pull_since if pull_since is not None else loop.time()
                    if fatal or loop.time() - pull_since >= s.image_pull_grace_seconds:
                        raise DeployError(
                            failed, target=target, status=f"image {image} cannot run", detail=text,
                            hint="check the image name and tag, and that the cluster can pull from its registry "
                                 "(imagePullSecrets)",
                            retryable=False,
                        )
                else:
                    pull_since = None
            if loop.time() >= deadline:
                raise DeployError(failed, target=target,
                                  status=f"rollout not complete after {s.progress_deadline_seconds:g}s", detail=detail,
                                  hint=describe, retryable=False)
            await asyncio.sleep(s.poll_seconds)

    async def _image_problem(self, failed: str, ns: str, dep: k8s.V1Deployment, image: str) -> tuple[bool, str] | None:
        """(fatal, reason) when pods of this Deployment cannot pull `image`; None if fine or pods are not readable."""
        selector = dep.spec.selector.match_labels or {}
        if not selector:
            return None
        label_selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        req = KubeRequest("list", "pods", ns)
        try:
            pods = await asyncio.to_thread(
                self._core().list_namespaced_pod, ns, label_selector=label_selector,
                _request_timeout=self.settings.request_timeout_seconds,
            )
        except ApiException as err:
            self._warn_once(req, kube_status_error(f"{failed}: cannot check image pulls", req, err))
            return None
        except (urllib3.exceptions.HTTPError, OSError) as err:
            log.debug("%s: cannot list pods to check image pulls: %s", req, _transport_text(err))
            return None
        for pod in pods.items or []:
            for cs in (pod.status.container_statuses or []) if pod.status else []:
                waiting = cs.state.waiting if cs.state else None
                if waiting is None or cs.image != image:
                    continue
                if waiting.reason in FATAL_WAITING:
                    return True, f"{waiting.reason}: {waiting.message or ''}".strip()
                if waiting.reason in PULL_WAITING:
                    return False, f"{waiting.reason}: {waiting.message or ''}".strip()
        return None

    def _warn_once(self, req: KubeRequest, err: DeployError) -> None:
        """Log a problem that does not fail the step (e.g. pods not readable) once per request kind, not every poll."""
        key = (str(req), err.status)
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s", err)

    # -- Deployer ----------------------------------------------------------------------------------
    async def current_version(self, stage: StageRef) -> str | None:
        ns, name = self._where(stage)
        dep = await self._read(f"could not read the version running in {stage.key}", ns, name)
        return None if dep is None else self.version_of(dep)

    async def deploy(self, stage: StageRef, role: Role, version: str, image: str | None, replicas: int) -> None:
        failed = f"could not deploy the {role} {version} to {stage.key}"
        if role not in ("canary", "baseline"):
            raise DeployError(f"deploy() runs canary and baseline, not {role!r}; use promote() for the primary", retryable=False)
        if replicas < 1:
            raise DeployError(failed, status="invalid replicas", detail=f"got {replicas}",
                              hint=f"set the {role} replicas to at least 1", retryable=False)
        if image is None and role == "canary":
            raise DeployError(failed, status="no image", hint="a canary needs an image; set the request's artifact",
                              retryable=False)
        if image is not None:
            check_image(image)
        ns, workload = self._where(stage)
        name = f"{workload}-{role}"
        purpose = f"deploy {role} {version} to {stage.key}"
        apps = self._apps()

        async def step() -> str:
            primary = await self._read_primary(failed, ns, workload)
            running = self.version_of(primary)
            if image is None and running not in (None, version):
                raise DeployError(
                    failed, target=f"deployments/{ns}/{workload}", status=f"primary runs {running}, not {version}",
                    hint="no image was given, so the baseline copies the primary; pass the baseline image explicitly",
                    retryable=False,
                )
            idx = self._container(primary)
            body = role_manifest(
                self._as_dict(primary), role=role, version=version, image=image, replicas=replicas, container=idx,
                primary_version=running, progress_deadline_seconds=self.settings.progress_deadline_seconds,
            )
            current = await self._read(failed, ns, name)
            if current is None:
                await self._call(failed, KubeRequest("create", "deployments", ns, name), apps.create_namespaced_deployment,
                                 ns, k8s.V1Deployment.from_dict(body))
                return manifest_image(body, idx)
            if (current.metadata.annotations or {}).get(SPEC_HASH_ANNOTATION) == body["metadata"]["annotations"][SPEC_HASH_ANNOTATION]:
                return manifest_image(body, idx)
            if self._as_dict(current.spec.selector) != body["spec"]["selector"]:
                # The selector is immutable: replace the whole Deployment.
                delete = KubeRequest("delete", "deployments", ns, name)
                await self._call(failed, delete, apps.delete_namespaced_deployment, name, ns, missing_ok=True,
                                 propagation_policy="Background")
                raise _Conflict(delete, "selector changed; recreating")
            body["metadata"]["resourceVersion"] = current.metadata.resource_version
            await self._call(failed, KubeRequest("update", "deployments", ns, name), apps.replace_namespaced_deployment,
                             name, ns, k8s.V1Deployment.from_dict(body))
            return manifest_image(body, idx)

        running_image = await self._converge(failed, step)
        await self._wait_rollout(failed, purpose, ns, name, running_image)

    async def promote(self, stage: StageRef, version: str, image: str) -> str | None:
        check_image(image)
        ns, name = self._where(stage)
        failed = f"could not promote {version} in {stage.key}"
        purpose = f"promote {version} in {stage.key}"
        apps = self._apps()

        async def step() -> str | None:
            primary = await self._read_primary(failed, ns, name)
            ann = primary.metadata.annotations or {}
            idx = self._container(primary)
            current = self.version_of(primary)
            if current == version:
                previous = ann.get(PREVIOUS_VERSION_ANNOTATION)
                if primary.spec.template.spec.containers[idx].image == image:
                    return previous  # already promoted: report what the first call replaced
                annotations: dict[str, str | None] = {}
            else:
                previous = current
                annotations = promote_annotations(previous, self._as_dict(primary.spec.template))
            patch = image_patch(
                resource_version=primary.metadata.resource_version, container_name=primary.spec.template.spec.containers[idx].name,
                version=version, image=image, annotations=annotations, template_labels={ROLE_LABEL: "primary"},
            )
            await self._call(failed, KubeRequest("patch", "deployments", ns, name), apps.patch_namespaced_deployment,
                             name, ns, patch)
            return previous

        previous = await self._converge(failed, step)
        await self._wait_rollout(failed, purpose, ns, name, image)
        return previous

    async def rollback(self, stage: StageRef, to_version: str | None, image: str | None) -> None:
        ns, name = self._where(stage)
        failed = f"could not roll {stage.key} back to {to_version}"
        purpose = f"roll back {stage.key} to {to_version}"
        if to_version is None:
            log.info("%s: no earlier version recorded; nothing to restore on the primary", purpose)
            return
        if image is not None:
            check_image(image)
        apps = self._apps()

        async def step() -> None:
            primary = await self._read_primary(failed, ns, name)
            current = self.version_of(primary)
            if current == to_version:
                return
            ann = primary.metadata.annotations or {}
            stored = ann.get(PREVIOUS_TEMPLATE_ANNOTATION)
            if ann.get(PREVIOUS_VERSION_ANNOTATION) == to_version and stored:
                body = restored_primary(self._as_dict(primary), stored, to_version, current)
                await self._call(failed, KubeRequest("update", "deployments", ns, name), apps.replace_namespaced_deployment,
                                 name, ns, k8s.V1Deployment.from_dict(body))
                return
            if image is None:
                raise DeployError(
                    failed, target=f"deployments/{ns}/{name}", status=f"primary runs {current}",
                    detail=f"it holds no saved template for {to_version} and no image was given",
                    hint=f"set it by hand (`kubectl -n {ns} rollout undo deployment/{name}`) or pass the image to roll "
                         "back to",
                    retryable=False,
                )
            patch = image_patch(
                resource_version=primary.metadata.resource_version,
                container_name=primary.spec.template.spec.containers[self._container(primary)].name,
                version=to_version, image=image, template_labels={},
                annotations={ROLLED_BACK_FROM_ANNOTATION: current or "unknown", PREVIOUS_VERSION_ANNOTATION: None,
                             PREVIOUS_TEMPLATE_ANNOTATION: None},
            )
            await self._call(failed, KubeRequest("patch", "deployments", ns, name), apps.patch_namespaced_deployment,
                             name, ns, patch)

        await self._converge(failed, step)
        await self._wait_rollout(failed, purpose, ns, name, None)

    async def replicas(self, stage: StageRef) -> int:
        ns, name = self._where(stage)
        primary = await self._read_primary(f"could not read the replicas of the primary in {stage.key}", ns, name)
        return primary.spec.replicas if primary.spec.replicas is not None else 1

    async def scale(self, stage: StageRef, replicas: int) -> None:
        """Patch the primary's spec.replicas (guarded by its resourceVersion) and wait like `kubectl rollout status`."""
        if replicas < 0:
            raise DeployError(f"scale {stage.key}: replicas must be >= 0, got {replicas}", retryable=False)
        ns, name = self._where(stage)
        purpose = f"scale {stage.key} to {replicas} replicas"
        failed = f"could not scale the primary in {stage.key} to {replicas} replicas"
        apps = self._apps()

        async def step() -> None:
            primary = await self._read_primary(failed, ns, name)
            if primary.spec.replicas == replicas:
                return  # already asked for: a retry after a crash writes nothing
            patch = {"metadata": {"resourceVersion": primary.metadata.resource_version}, "spec": {"replicas": replicas}}
            await self._call(failed, KubeRequest("patch", "deployments", ns, name), apps.patch_namespaced_deployment,
                             name, ns, patch)

        await self._converge(failed, step)
        await self._wait_rollout(failed, purpose, ns, name, None)

    # -- Autoscaling -------------------------------------------------------------------------------
    async def _hpa_of(self, failed: str, ns: str, name: str) -> k8s.V2HorizontalPodAutoscaler | None:
        """The HPA whose scaleTargetRef is Deployment `name`; None when none (or the cluster serves no autoscaling/v2)."""
        found = await self._call(failed, KubeRequest("list", "horizontalpodautoscalers", ns),
                                 self._autoscaling().list_namespaced_horizontal_pod_autoscaler, ns, missing_ok=True)
        mine = [h for h in (found.items if found is not None else []) or []
                if h.spec.scale_target_ref.kind == "Deployment" and h.spec.scale_target_ref.name == name
                and (h.spec.scale_target_ref.api_version or "apps/v1").split("/")[0] == "apps"]
        if len(mine) > 1:
            names = ", ".join(sorted(h.metadata.name for h in mine))
            raise DeployError(failed, target=f"horizontalpodautoscalers/{ns}", status=f"{len(mine)} HPAs scale {name}",
                              detail=names, hint="Kubernetes refuses to scale a Deployment two HPAs target "
                              "(AmbiguousSelector); delete all but one", retryable=False)
        return mine[0] if mine else None

    async def autoscaler(self, stage: StageRef) -> Autoscaler | None:
        """The HorizontalPodAutoscaler whose scaleTargetRef is the stage's primary Deployment, if any."""
        ns, name = self._where(stage)
        hpa = await self._hpa_of(f"could not read the autoscaler of the primary in {stage.key}", ns, name)
        if hpa is None:
            return None
        return Autoscaler(name=hpa.metadata.name, min_replicas=hpa.spec.min_replicas or 1, max_replicas=hpa.spec.max_replicas)

    async def set_min_replicas(self, stage: StageRef, autoscaler: str, min_replicas: int, *, wait: bool) -> None:
        """Patch the HPA's spec.minReplicas (guarded by its resourceVersion); with `wait`, return once the HPA has
        scaled the primary to at least that many and they are ready."""
        ns, name = self._where(stage)
        failed = f"could not set the minReplicas of HPA {ns}/{autoscaler} ({stage.key}) to {min_replicas}"
        api = self._autoscaling()

        async def step() -> None:
            req = KubeRequest("get", "horizontalpodautoscalers", ns, autoscaler)
            hpa = await self._call(failed, req, api.read_namespaced_horizontal_pod_autoscaler, autoscaler, ns, missing_ok=True)
            ref = hpa.spec.scale_target_ref if hpa is not None else None
            if hpa is None or ref is None or ref.kind != "Deployment" or ref.name != name:
                raise DeployError(failed, target=f"horizontalpodautoscalers/{ns}/{autoscaler}",
                                  status="not found" if hpa is None else f"scales {ref.kind if ref else '?'}/{ref.name if ref else '?'}",
                                  hint=f"the HPA of deployment {name} changed while Bifrost worked; check "
                                       f"`kubectl -n {ns} get hpa` and re-run", retryable=False)
            if min_replicas > hpa.spec.max_replicas:
                raise DeployError(failed, target=f"horizontalpodautoscalers/{ns}/{autoscaler}",
                                  status=f"above its maxReplicas {hpa.spec.max_replicas}",
                                  hint="raise the HPA's maxReplicas or pre-warm less (headroom, receivers)", retryable=False)
            if (hpa.spec.min_replicas or 1) == min_replicas:
                return  # already set: a retry after a crash writes nothing
            patch = {"metadata": {"resourceVersion": hpa.metadata.resource_version}, "spec": {"minReplicas": min_replicas}}
            await self._call(failed, KubeRequest("patch", "horizontalpodautoscalers", ns, autoscaler),
                             api.patch_namespaced_horizontal_pod_autoscaler, autoscaler, ns, patch)

        await self._converge(failed, step)
        if wait:
            await self._wait_scaled(failed, f"HPA {autoscaler} to scale {stage.key} to {min_replicas}", ns, name,
                                    autoscaler, min_replicas)

    async def _wait_scaled(self, failed: str, purpose: str, ns: str, name: str, autoscaler: str, at_least: int) -> None:
        """Poll until the autoscaler has asked the Deployment for `at_least` replicas, then wait for its rollout."""
        s = self.settings
        loop = asyncio.get_running_loop()
        deadline = loop.time() + s.progress_deadline_seconds
        while True:
            dep = await self._read_primary(failed, ns, name)
            asked = dep.spec.replicas if dep.spec.replicas is not None else 1
            if asked >= at_least:
                break
            _heartbeat(f"{purpose}: asks {asked}")
            if loop.time() >= deadline:
                raise DeployError(
                    failed, target=f"deployments/{ns}/{name}", status=f"still {asked} replicas after {s.progress_deadline_seconds:g}s",
                    detail=f"HPA {autoscaler} did not scale it to its new minReplicas {at_least}",
                    hint=f"inspect with `kubectl -n {ns} describe hpa {autoscaler}`; the activity will be retried",
                    retryable=True)
            await asyncio.sleep(s.poll_seconds)
        await self._wait_rollout(failed, purpose, ns, name, None)

    async def cleanup(self, stage: StageRef) -> None:
        ns, workload = self._where(stage)
        apps = self._apps()
        roles = {f"{workload}-canary": "canary", f"{workload}-baseline": "baseline"}
        refused: list[tuple[str, DeployError]] = []
        for name, role in roles.items():  # try both: a refused canary must not leave the baseline untried
            try:
                await self._call(f"could not remove the {role} in {stage.key}", KubeRequest("delete", "deployments", ns, name),
                                 apps.delete_namespaced_deployment, name, ns, missing_ok=True, propagation_policy="Background")
            except DeployError as err:
                refused.append((role, err))
        if len(refused) == 1:
            raise refused[0][1]
        if refused:
            errors = [err for _, err in refused]
            statuses = list(dict.fromkeys(e.status for e in errors if e.status))
            raise DeployError(
                f"could not remove the canary and the baseline in {stage.key}",
                target=" and ".join(e.target for e in errors if e.target), status="; ".join(statuses) or None,
                detail=errors[0].detail, hint=errors[0].hint, retryable=any(e.retryable for e in errors),
            )
        deadline = time.monotonic() + max(10.0, self.settings.request_timeout_seconds)
        while True:  # confirm they are gone (a finalizer may hold them briefly)
            left = [n for n in roles if await self._read(f"could not remove the {roles[n]} in {stage.key}", ns, n) is not None]
            if not left:
                return
            _heartbeat(f"waiting for {', '.join(left)} to be deleted")
            if time.monotonic() >= deadline:
                raise DeployError(
                    f"could not remove the {roles[left[0]]} in {stage.key}",
                    target=", ".join(f"deployments/{ns}/{n}" for n in left), status="still present after delete",
                    hint=f"check its finalizers (`kubectl -n {ns} get deployment {left[0]} -o yaml`)", retryable=True,
                )
            await asyncio.sleep(self.settings.poll_seconds)


def _hint(status: int, req: KubeRequest) -> str:
    """What to do about an API answer, for the request that got it."""
    if status == 401:
        return ("the API server rejected the worker's credentials; refresh the kube context's credentials or the "
                "token named by token_env in the targets file")
    if status == 403:
        return (f"grant {req.verb} on {req.resource} in namespace {req.namespace} to the worker's service account "
                "(check the worker's RBAC)")
    if status == 404:
        if req.name is None or req.verb == "create":
            return f"namespace {req.namespace} does not exist or serves no {req.resource}; check namespace in the targets file"
        return (f"{req.resource} {req.namespace}/{req.name} does not exist; check namespace and workload in the "
                "targets file")
    if status == 409:
        return "another controller or person changed it at the same time; the activity will be retried"
    if status == 422:
        return ("the API server rejected the object as invalid; fix what it names (the image, the replicas or the "
                "primary's manifest)")
    if status == 400:
        return "the API server could not read the request; this is a Bifrost bug, please report it with this line"
    if status == 429 or status >= 500:
        return "the API server is overloaded or failing; the activity will be retried; if this persists, check the control plane"
    return "unexpected answer from the API server; please report it with this line"
