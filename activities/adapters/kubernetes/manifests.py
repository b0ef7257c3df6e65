"""Pure helpers of the Kubernetes deployer: the objects and patches it writes, and how it reads a rollout.

No API calls here: every function maps plain dicts or client models to dicts, so each can be unit-tested.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from typing import Any

from kubernetes import client as k8s

from activities.adapters.base import DeployError
from common.types import Role

NAME_LABEL = "app.kubernetes.io/name"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
ROLE_LABEL = "bifrost.dev/role"
VERSION_LABEL = "bifrost.dev/version"
VERSION_ANNOTATION = "bifrost.dev/version"
PREVIOUS_VERSION_ANNOTATION = "bifrost.dev/previous-version"
PREVIOUS_TEMPLATE_ANNOTATION = "bifrost.dev/previous-template"
ROLLED_BACK_FROM_ANNOTATION = "bifrost.dev/rolled-back-from"
SPEC_HASH_ANNOTATION = "bifrost.dev/spec-hash"

# Container states that mean the image will not run without a new deploy.
FATAL_WAITING = frozenset({"InvalidImageName", "ErrImageNeverPull"})
PULL_WAITING = frozenset({"ErrImagePull", "ImagePullBackOff"})
_IMAGE_REF = re.compile(r"^[a-z0-9]+([._/:@-][A-Za-z0-9_.+-]+)*$")


def label_value(version: str) -> str:
    """A version as a valid label value (63 chars of [A-Za-z0-9_.-]); the exact version goes in an annotation."""
    value = re.sub(r"[^A-Za-z0-9_.-]", "_", version)[:63]
    return value.strip("_.-") or "unknown"


def check_image(image: str) -> None:
    """Reject image references the cluster could never pull, before touching anything."""
    if not image or image != image.strip() or not _IMAGE_REF.match(image):
        raise DeployError(
            f"invalid image reference {image!r}: expected e.g. 'registry.example.com/team/app:1.2.3'; "
            "fix the request's artifact",
            retryable=False,
        )


def rollout_state(dep: k8s.V1Deployment) -> tuple[str, str]:
    """('complete' | 'progressing' | 'failed', detail), judged like `kubectl rollout status`."""
    status = dep.status or k8s.V1DeploymentStatus()
    want = dep.spec.replicas if dep.spec.replicas is not None else 1
    generation = dep.metadata.generation or 0
    for cond in status.conditions or []:
        if cond.type == "Progressing" and cond.reason == "ProgressDeadlineExceeded":
            return "failed", f"progress deadline exceeded: {cond.message or 'no progress'}"
    if (status.observed_generation or 0) < generation:
        return "progressing", f"waiting for the controller to observe generation {generation}"
    updated = status.updated_replicas or 0
    total = status.replicas or 0
    available = status.available_replicas or 0
    if updated < want:
        return "progressing", f"{updated} of {want} replicas updated"
    if total > updated:
        return "progressing", f"{total - updated} old replicas pending termination"
    if available < updated:
        return "progressing", f"{available} of {updated} updated replicas available"
    return "complete", f"{available} of {want} replicas available"


def container_index(dep: k8s.V1Deployment, want: str | None) -> int:
    """Index of the container whose image Bifrost changes: `want` by name, else the first."""
    containers = dep.spec.template.spec.containers or []
    if want is None:
        return 0
    for i, c in enumerate(containers):
        if c.name == want:
            return i
    names = ", ".join(c.name for c in containers)
    raise DeployError(
        f"Deployment {dep.metadata.namespace}/{dep.metadata.name} has no container {want!r} (has: {names}); "
        "fix `container` in the targets file",
        retryable=False,
    )


def version_of(dep: k8s.V1Deployment, container: int) -> str | None:
    """The version a Deployment runs: Bifrost's annotation, else app.kubernetes.io/version, else the image tag."""
    ann = dep.metadata.annotations or {}
    labels = dep.metadata.labels or {}
    if ann.get(VERSION_ANNOTATION):
        return str(ann[VERSION_ANNOTATION])
    if labels.get("app.kubernetes.io/version"):
        return str(labels["app.kubernetes.io/version"])
    image = dep.spec.template.spec.containers[container].image or ""
    tail = image.rsplit("/", 1)[-1]
    return tail.split(":", 1)[1].split("@", 1)[0] if ":" in tail else None


def role_manifest(
    primary: dict[str, Any], *, role: Role, version: str, image: str | None, replicas: int, container: int,
    primary_version: str | None, progress_deadline_seconds: float,
) -> dict[str, Any]:
    """The wanted canary/baseline Deployment: the primary's pod template with role and version labels.

    `primary` is the primary Deployment as a plain dict; a spec-hash annotation lets a retry see that the
    object is already as wanted."""
    meta = primary["metadata"]
    ns, workload = meta["namespace"], meta["name"]
    template: dict[str, Any] = copy.deepcopy(primary["spec"]["template"])
    tmeta = template.setdefault("metadata", {})
    tmeta.setdefault("labels", {}).update({ROLE_LABEL: role, VERSION_LABEL: label_value(version)})
    tmeta.setdefault("annotations", {})[VERSION_ANNOTATION] = version
    # A baseline without an image, or of the version the primary runs, is a fresh copy of the primary.
    if image is not None and not (role == "baseline" and primary_version == version):
        template["spec"]["containers"][container]["image"] = image
    selector = copy.deepcopy(primary["spec"]["selector"])
    selector.setdefault("matchLabels", {})[ROLE_LABEL] = role
    spec = {
        "replicas": replicas,
        "selector": selector,
        "template": template,
        "progressDeadlineSeconds": max(1, int(progress_deadline_seconds)),
        "revisionHistoryLimit": 2,
    }
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": f"{workload}-{role}",
            "namespace": ns,
            "labels": {NAME_LABEL: workload, MANAGED_BY_LABEL: "bifrost", ROLE_LABEL: role, VERSION_LABEL: label_value(version)},
            "annotations": {VERSION_ANNOTATION: version, SPEC_HASH_ANNOTATION: digest},
        },
        "spec": spec,
    }


def manifest_image(body: dict[str, Any], container: int) -> str:
    """The image a manifest runs in the deployer's container."""
    return str(body["spec"]["template"]["spec"]["containers"][container]["image"])


def image_patch(
    *, resource_version: str | None, container_name: str, version: str, image: str,
    annotations: dict[str, str | None], template_labels: dict[str, str],
) -> dict[str, Any]:
    """A strategic-merge patch that sets the primary's image and version, guarded by `resource_version`."""
    return {
        "metadata": {
            "resourceVersion": resource_version,
            "labels": {VERSION_LABEL: label_value(version)},
            "annotations": {**annotations, VERSION_ANNOTATION: version},
        },
        "spec": {"template": {
            "metadata": {"labels": {VERSION_LABEL: label_value(version), **template_labels},
                         "annotations": {VERSION_ANNOTATION: version}},
            "spec": {"containers": [{"name": container_name, "image": image}]},
        }},
    }


def promote_annotations(previous: str | None, template: dict[str, Any]) -> dict[str, str | None]:
    """What a promotion records on the primary so a rollback can restore the exact previous template."""
    return {
        PREVIOUS_VERSION_ANNOTATION: previous,
        PREVIOUS_TEMPLATE_ANNOTATION: json.dumps(template, sort_keys=True, separators=(",", ":")),
        ROLLED_BACK_FROM_ANNOTATION: None,
    }


def restored_primary(primary: dict[str, Any], stored_template: str, to_version: str, current: str | None) -> dict[str, Any]:
    """The primary with the template saved at promotion put back (a full object for `replace`)."""
    body = copy.deepcopy(primary)
    body.pop("status", None)
    body["spec"]["template"] = json.loads(stored_template)
    meta = body["metadata"]
    meta.setdefault("labels", {})[VERSION_LABEL] = label_value(to_version)
    annotations = meta.setdefault("annotations", {})
    annotations.pop(PREVIOUS_TEMPLATE_ANNOTATION, None)
    annotations.pop(PREVIOUS_VERSION_ANNOTATION, None)
    annotations[VERSION_ANNOTATION] = to_version
    annotations[ROLLED_BACK_FROM_ANNOTATION] = current or "unknown"
    return body
