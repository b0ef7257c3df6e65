"""Loading deploy/ files and checking Kubernetes objects against the official client's models.

The `kubernetes` 37.x models are pydantic: a wrong type raises, but an unknown field is silently
dropped. So an object is deserialized into its model and serialized back, and any field that did not
survive the round trip is a typo (or a field this API version does not have).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from kubernetes.client import ApiClient

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"

# kind -> the client model it must deserialize into. A kind missing here fails the shape test, so a
# new manifest cannot skip the model check unnoticed.
MODELS = {
    "Namespace": "V1Namespace",
    "ServiceAccount": "V1ServiceAccount",
    "Role": "V1Role",
    "RoleBinding": "V1RoleBinding",
    "ConfigMap": "V1ConfigMap",
    "Deployment": "V1Deployment",
}
KUSTOMIZATION = "Kustomization"  # a kustomize file, not an API object: no metadata.name


def yaml_files() -> list[Path]:
    """Every YAML file under deploy/, in a stable order."""
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())


def load_documents(path: Path) -> list[Any]:
    """All non-empty documents of a (multi-document) YAML file."""
    with path.open() as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


def kubernetes_objects() -> list[tuple[str, dict[str, Any]]]:
    """(file name, object) for every API object under deploy/kubernetes/, kustomization excluded."""
    out = []
    for path in yaml_files():
        if path.parent != KUBERNETES:
            continue
        for doc in load_documents(path):
            if doc.get("kind") != KUSTOMIZATION:
                out.append((path.name, doc))
    return out


def find(kind: str, name: str | None = None, namespace: str | None = None) -> list[dict[str, Any]]:
    """The manifests' objects of `kind`, optionally narrowed by name and namespace."""
    return [
        obj for _, obj in kubernetes_objects()
        if obj["kind"] == kind
        and (name is None or obj["metadata"]["name"] == name)
        and (namespace is None or obj["metadata"].get("namespace") == namespace)
    ]


def round_trip(obj: dict[str, Any], model: str) -> Any:
    """`obj` deserialized into the client model `model` and serialized back (raises on wrong types)."""
    api = ApiClient()
    return api.sanitize_for_serialization(api.deserialize(json.dumps(obj), model, "application/json"))


def lost_fields(original: Any, back: Any, path: str = "") -> list[str]:
    """Paths in `original` that are missing or different in `back`."""
    if isinstance(original, dict):
        if not isinstance(back, dict):
            return [f"{path or '.'}: became {back!r}"]
        out = []
        for key, value in original.items():
            sub = f"{path}.{key}" if path else key
            out += lost_fields(value, back[key], sub) if key in back else [f"{sub}: unknown field"]
        return out
    if isinstance(original, list):
        if not isinstance(back, list) or len(back) != len(original):
            return [f"{path}: became {back!r}"]
        return [p for i, (o, b) in enumerate(zip(original, back)) for p in lost_fields(o, b, f"{path}[{i}]")]
    return [] if original == back else [f"{path}: {original!r} became {back!r}"]
