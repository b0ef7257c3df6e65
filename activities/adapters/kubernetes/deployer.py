"""Kubernetes deployer on the official `kubernetes` client: canary and baseline Deployments beside the primary.

Every step reads the cluster first and converges to the wanted state, so a retried activity repeats
nothing harmful. Writes carry the read `resourceVersion`; a 409 re-reads and tries again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from temporalio import activity

from activities.adapters.base import DeployError
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
from activities.adapters.secrets import SecretError, resolve_secret
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


class _Conflict(Exception):
    """A write lost a race (HTTP 409); the step re-reads and tries again."""


def _heartbeat(*details: object) -> None:
    """Heartbeat when running inside a Temporal activity, so long waits are not mistaken for a dead worker."""
    if activity.in_activity():
        activity.heartbeat(*details)


def _status_message(err: ApiException) -> str:
    """The API server's own explanation from the Status body, or the HTTP reason."""
    try:
        body = json.loads(err.body or "{}")
        return str(body.get("message") or err.reason or "")
    except (ValueError, TypeError):
        return str(err.body or err.reason or "")


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
        self._factory = client_factory
        self.settings = settings
        self._client: k8s.ApiClient | None = None

    # -- plumbing ----------------------------------------------------------------------------------
    def _api_client(self) -> k8s.ApiClient:
        if self._client is None:
            try:
                self._client = self._factory()
            except SecretError as err:
                raise DeployError(str(err), retryable=False) from err
            except Exception as err:  # kubeconfig parse errors, missing context, ...
                raise DeployError(
                    f"cannot build a Kubernetes client ({type(err).__name__}: {err}); "
                    "check kubeconfig/context or api_url in the targets file",
                    retryable=False,
                ) from err
        return self._client

    def _apps(self) -> k8s.AppsV1Api:
        return k8s.AppsV1Api(self._api_client())

    def _core(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(self._api_client())

    def _where(self, stage: StageRef) -> tuple[str, str]:
        s = self.settings
        return s.namespace.replace("{service}", stage.service), s.workload.replace("{service}", stage.service)

    async def _call(self, what: str, fn: Callable[..., T], *args: Any, missing_ok: bool = False, **kwargs: Any) -> T | None:
        """One API call in a thread: retries 5xx/429/connection errors, maps the rest to DeployError or _Conflict."""
        s = self.settings
        kwargs["_request_timeout"] = s.request_timeout_seconds
        last = ""
        for attempt in range(1, s.max_attempts + 1):
            try:
                return await asyncio.to_thread(fn, *args, **kwargs)
            except ApiException as err:
                status = err.status or 0
                msg = _status_message(err)
                if status == 404 and missing_ok:
                    return None
                if status == 409:
                    raise _Conflict(f"{what}: {msg}") from err
                if status in (400, 401, 403, 404, 422):
                    raise DeployError(f"{what}: HTTP {status}: {msg}; {_hint(status)}", retryable=False) from err
                last = f"HTTP {status}: {msg}"
            except (urllib3.exceptions.HTTPError, OSError) as err:
                last = f"{type(err).__name__}: {err}"
            if attempt < s.max_attempts:
                _heartbeat(f"{what}: {last}; retry {attempt}")
                await asyncio.sleep(s.backoff_seconds * 2 ** (attempt - 1))
        raise DeployError(
            f"{what}: still failing after {s.max_attempts} attempts ({last}); the API server may be down, "
            "the activity will be retried",
            retryable=True,
        )

    async def _converge(self, what: str, step: Callable[[], Awaitable[T]]) -> T:
        """Run a read-modify-write step until it does not lose a race."""
        s = self.settings
        for attempt in range(1, s.max_attempts + 1):
            try:
                return await step()
            except _Conflict as err:
                log.info("%s: conflict (%s), re-reading (attempt %d)", what, err, attempt)
                _heartbeat(f"{what}: conflict, retry {attempt}")
                if attempt < s.max_attempts:
                    await asyncio.sleep(s.backoff_seconds * attempt / 4)
        raise DeployError(
            f"{what}: the object kept changing under us ({s.max_attempts} conflicts in a row); "
            "another controller or person is editing it, the activity will be retried",
            retryable=True,
        )

    async def _read(self, ns: str, name: str) -> k8s.V1Deployment | None:
        return await self._call(f"read deployment {ns}/{name}", self._apps().read_namespaced_deployment, name, ns, missing_ok=True)

    async def _read_primary(self, ns: str, name: str, purpose: str) -> k8s.V1Deployment:
        dep = await self._read(ns, name)
        if dep is None:
            raise DeployError(
                f"{purpose}: primary Deployment {ns}/{name} not found; Bifrost deploys beside an existing primary, "
                "so create it first or fix namespace/workload in the targets file",
                retryable=False,
            )
        return dep

    def _container(self, dep: k8s.V1Deployment) -> int:
        return container_index(dep, self.settings.container)

    def version_of(self, dep: k8s.V1Deployment) -> str | None:
        """The version a Deployment runs (see `manifests.version_of`)."""
        return version_of(dep, self._container(dep))

    def _as_dict(self, obj: object) -> dict[str, Any]:
        return self._api_client().sanitize_for_serialization(obj)

    # -- waiting -----------------------------------------------------------------------------------
    async def _wait_rollout(self, ns: str, name: str, image: str | None, purpose: str) -> None:
        """Poll until the rollout completes; fail on ProgressDeadlineExceeded, unpullable images or our own deadline."""
        s = self.settings
        loop = asyncio.get_running_loop()
        # A little past the server's own progress deadline, so its ProgressDeadlineExceeded (more telling) wins.
        deadline = loop.time() + s.progress_deadline_seconds + min(30.0, max(2 * s.poll_seconds, s.progress_deadline_seconds / 2))
        pull_since: float | None = None
        while True:
            dep = await self._read(ns, name)
            if dep is None:
                raise DeployError(f"{purpose}: Deployment {ns}/{name} disappeared during its rollout; retrying", retryable=True)
            state, detail = rollout_state(dep)
            _heartbeat(f"{purpose}: {ns}/{name}: {detail}")
            if state == "complete":
                return
            if state == "failed":
                raise DeployError(
                    f"{purpose}: rollout of {ns}/{name} failed: {detail}; inspect with "
                    f"`kubectl -n {ns} describe deployment {name}`",
                    retryable=False,
                )
            if image is not None:
                problem = await self._image_problem(ns, dep, image)
                if problem is not None:
                    fatal, text = problem
                    pull_since = pull_since if pull_since is not None else loop.time()
                    if fatal or loop.time() - pull_since >= s.image_pull_grace_seconds:
                        raise DeployError(f"{purpose}: image {image} cannot run in {ns}/{name}: {text}", retryable=False)
                else:
                    pull_since = None
            if loop.time() >= deadline:
                raise DeployError(
                    f"{purpose}: rollout of {ns}/{name} did not complete within {s.progress_deadline_seconds:g}s "
                    f"({detail}); inspect with `kubectl -n {ns} describe deployment {name}`",
                    retryable=False,
                )
            await asyncio.sleep(s.poll_seconds)

    async def _image_problem(self, ns: str, dep: k8s.V1Deployment, image: str) -> tuple[bool, str] | None:
        """(fatal, reason) when pods of this Deployment cannot pull `image`; None if fine or pods are not readable."""
        selector = dep.spec.selector.match_labels or {}
        if not selector:
            return None
        label_selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        try:
            pods = await asyncio.to_thread(
                self._core().list_namespaced_pod, ns, label_selector=label_selector,
                _request_timeout=self.settings.request_timeout_seconds,
            )
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as err:
            log.debug("cannot list pods of %s/%s to check image pulls: %s", ns, dep.metadata.name, err)
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

    # -- Deployer ----------------------------------------------------------------------------------
    async def current_version(self, stage: StageRef) -> str | None:
        ns, name = self._where(stage)
        dep = await self._read(ns, name)
        return None if dep is None else self.version_of(dep)

    async def deploy(self, stage: StageRef, role: Role, version: str, image: str | None, replicas: int) -> None:
        if role not in ("canary", "baseline"):
            raise DeployError(f"deploy() runs canary and baseline, not {role!r}; use promote() for the primary", retryable=False)
        if replicas < 1:
            raise DeployError(f"{role} replicas must be at least 1, got {replicas}", retryable=False)
        if image is None and role == "canary":
            raise DeployError(f"deploy canary {version} to {stage.key}: a canary needs an image", retryable=False)
        if image is not None:
            check_image(image)
        ns, workload = self._where(stage)
        name = f"{workload}-{role}"
        purpose = f"deploy {role} {version} to {stage.key}"
        apps = self._apps()

        async def step() -> str:
            primary = await self._read_primary(ns, workload, purpose)
            running = self.version_of(primary)
            if image is None and running not in (None, version):
                raise DeployError(
                    f"{purpose}: no image given, so the baseline copies the primary, but {ns}/{workload} runs "
                    f"{running}, not {version}; pass the baseline image explicitly",
                    retryable=False,
                )
            idx = self._container(primary)
            body = role_manifest(
                self._as_dict(primary), role=role, version=version, image=image, replicas=replicas, container=idx,
                primary_version=running, progress_deadline_seconds=self.settings.progress_deadline_seconds,
            )
            current = await self._read(ns, name)
            if current is None:
                await self._call(f"{purpose}: create {ns}/{name}", apps.create_namespaced_deployment, ns, k8s.V1Deployment.from_dict(body))
                return manifest_image(body, idx)
            if (current.metadata.annotations or {}).get(SPEC_HASH_ANNOTATION) == body["metadata"]["annotations"][SPEC_HASH_ANNOTATION]:
                return manifest_image(body, idx)
            if self._as_dict(current.spec.selector) != body["spec"]["selector"]:
                # The selector is immutable: replace the whole Deployment.
                await self._call(f"{purpose}: delete {ns}/{name} (selector changed)", apps.delete_namespaced_deployment,
                                 name, ns, missing_ok=True, propagation_policy="Background")
                raise _Conflict("selector changed; recreating")
            body["metadata"]["resourceVersion"] = current.metadata.resource_version
            await self._call(f"{purpose}: update {ns}/{name}", apps.replace_namespaced_deployment, name, ns, k8s.V1Deployment.from_dict(body))
            return manifest_image(body, idx)

        running_image = await self._converge(purpose, step)
        await self._wait_rollout(ns, name, running_image, purpose)

    async def promote(self, stage: StageRef, version: str, image: str) -> str | None:
        check_image(image)
        ns, name = self._where(stage)
        purpose = f"promote {version} in {stage.key}"
        apps = self._apps()

        async def step() -> str | None:
            primary = await self._read_primary(ns, name, purpose)
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
            await self._call(f"{purpose}: patch {ns}/{name}", apps.patch_namespaced_deployment, name, ns, patch)
            return previous

        previous = await self._converge(purpose, step)
        await self._wait_rollout(ns, name, image, purpose)
        return previous

    async def rollback(self, stage: StageRef, to_version: str | None, image: str | None) -> None:
        ns, name = self._where(stage)
        purpose = f"roll back {stage.key} to {to_version}"
        if to_version is None:
            log.info("%s: no earlier version recorded; nothing to restore on the primary", purpose)
            return
        if image is not None:
            check_image(image)
        apps = self._apps()

        async def step() -> None:
            primary = await self._read_primary(ns, name, purpose)
            current = self.version_of(primary)
            if current == to_version:
                return
            ann = primary.metadata.annotations or {}
            stored = ann.get(PREVIOUS_TEMPLATE_ANNOTATION)
            if ann.get(PREVIOUS_VERSION_ANNOTATION) == to_version and stored:
                body = restored_primary(self._as_dict(primary), stored, to_version, current)
                await self._call(f"{purpose}: restore template of {ns}/{name}", apps.replace_namespaced_deployment,
                                 name, ns, k8s.V1Deployment.from_dict(body))
                return
            if image is None:
                raise DeployError(
                    f"{purpose}: primary {ns}/{name} runs {current} and holds no saved template for {to_version}, "
                    f"and no image was given; set it by hand (`kubectl -n {ns} rollout undo deployment/{name}`) "
                    "or pass the image to roll back to",
                    retryable=False,
                )
            patch = image_patch(
                resource_version=primary.metadata.resource_version,
                container_name=primary.spec.template.spec.containers[self._container(primary)].name,
                version=to_version, image=image, template_labels={},
                annotations={ROLLED_BACK_FROM_ANNOTATION: current or "unknown", PREVIOUS_VERSION_ANNOTATION: None,
                             PREVIOUS_TEMPLATE_ANNOTATION: None},
            )
            await self._call(f"{purpose}: patch {ns}/{name}", apps.patch_namespaced_deployment, name, ns, patch)

        await self._converge(purpose, step)
        await self._wait_rollout(ns, name, None, purpose)

    async def replicas(self, stage: StageRef) -> int:
        ns, name = self._where(stage)
        primary = await self._read_primary(ns, name, f"read replicas of {stage.key}")
        return primary.spec.replicas if primary.spec.replicas is not None else 1

    async def scale(self, stage: StageRef, replicas: int) -> None:
        """Patch the primary's spec.replicas (guarded by its resourceVersion) and wait like `kubectl rollout status`."""
        if replicas < 0:
            raise DeployError(f"scale {stage.key}: replicas must be >= 0, got {replicas}", retryable=False)
        ns, name = self._where(stage)
        purpose = f"scale {stage.key} to {replicas} replicas"
        apps = self._apps()

        async def step() -> None:
            primary = await self._read_primary(ns, name, purpose)
            if primary.spec.replicas == replicas:
                return  # already asked for: a retry after a crash writes nothing
            patch = {"metadata": {"resourceVersion": primary.metadata.resource_version}, "spec": {"replicas": replicas}}
            await self._call(f"{purpose}: patch {ns}/{name}", apps.patch_namespaced_deployment, name, ns, patch)

        await self._converge(purpose, step)
        await self._wait_rollout(ns, name, None, purpose)

    async def cleanup(self, stage: StageRef) -> None:
        ns, workload = self._where(stage)
        apps = self._apps()
        names = [f"{workload}-canary", f"{workload}-baseline"]
        for name in names:
            await self._call(f"clean up {ns}/{name}", apps.delete_namespaced_deployment, name, ns,
                             missing_ok=True, propagation_policy="Background")
        deadline = time.monotonic() + max(10.0, self.settings.request_timeout_seconds)
        while True:  # confirm they are gone (a finalizer may hold them briefly)
            left = [n for n in names if await self._read(ns, n) is not None]
            if not left:
                return
            _heartbeat(f"waiting for {', '.join(left)} to be deleted")
            if time.monotonic() >= deadline:
                raise DeployError(f"clean up {stage.key}: {', '.join(left)} still present after delete; "
                                  "check finalizers with kubectl", retryable=True)
            await asyncio.sleep(self.settings.poll_seconds)


def _hint(status: int) -> str:
    return {
        400: "the request was malformed; this is a Bifrost bug, please report it with this message",
        401: "the credentials were rejected; check the kube context or the token environment variable",
        403: "the worker's identity lacks permission; grant get/list/create/update/patch/delete on deployments "
             "(and list on pods) in this namespace",
        404: "not found; check namespace and workload in the targets file",
        422: "the API server rejected the object as invalid; fix the image, replicas or the primary's manifest",
    }.get(status, "")
