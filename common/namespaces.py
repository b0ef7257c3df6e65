"""Where Bifrost's machinery runs: the namespace beside the one people open, and the Nexus endpoint that reaches it.

A rollout, revert, guard, drill or hand-started traffic change runs in the worker's namespace (the one a release
manager opens in the Web UI). A rollout's stages, their reports and evacuations, and the service lock run in
`<namespace>-machinery`, so the default workflow list shows each thing a person or CI started once. A rollout
reaches its stages through one Nexus endpoint per (namespace, task queue), named here so that the worker that
creates it and the workflow that calls it agree without configuration.
"""

from __future__ import annotations

import hashlib
import re

MACHINERY_SUFFIX = "-machinery"
ENDPOINT_PREFIX = "bifrost"
_SLUG_CHARS = 40  # endpoint names are short; the hash keeps two long task queues apart


def machinery_namespace(namespace: str) -> str:
    """The namespace where the machinery of `namespace` runs (stages, reports, the service lock)."""
    return namespace if namespace.endswith(MACHINERY_SUFFIX) else f"{namespace}{MACHINERY_SUFFIX}"


def home_namespace(namespace: str) -> str:
    """The namespace people open, given either it or its machinery namespace."""
    return namespace[: -len(MACHINERY_SUFFIX)] if namespace.endswith(MACHINERY_SUFFIX) else namespace


def is_machinery(namespace: str) -> bool:
    return namespace.endswith(MACHINERY_SUFFIX)


def endpoint_name(namespace: str, task_queue: str) -> str:
    """The Nexus endpoint through which rollouts of `namespace` on `task_queue` start their stages: deterministic,
    and valid as an endpoint name (`^[a-zA-Z][a-zA-Z0-9-]*[a-zA-Z0-9]$`) whatever the namespace and queue are."""
    home = home_namespace(namespace)
    slug = re.sub(r"[^a-zA-Z0-9]+", "-", f"{home}-{task_queue}").strip("-")[:_SLUG_CHARS].strip("-")
    digest = hashlib.sha256(f"{home}\0{task_queue}".encode()).hexdigest()[:12]
    return f"{ENDPOINT_PREFIX}-{slug}-{digest}" if slug else f"{ENDPOINT_PREFIX}-{digest}"
