"""The Nexus endpoint a worker creates at start: idempotent, and a clear error when its name targets somewhere else or
the machinery namespace is missing (never a silent reuse)."""

from __future__ import annotations

import uuid

import pytest
from temporalio.api.nexus.v1 import EndpointSpec, EndpointTarget
from temporalio.api.operatorservice.v1 import CreateNexusEndpointRequest
from temporalio.client import Client

from common.namespaces import endpoint_name, machinery_namespace
from worker.endpoints import EndpointConflict, ensure_endpoint


async def test_the_endpoint_is_created_once_and_found_again(env) -> None:
    queue = f"tq-{uuid.uuid4().hex[:8]}"
    first = await ensure_endpoint(env.client, queue)
    assert first == endpoint_name("default", queue) and await ensure_endpoint(env.client, queue) == first


async def test_an_endpoint_of_that_name_targeting_elsewhere_is_an_error_naming_it(env) -> None:
    queue = f"tq-{uuid.uuid4().hex[:8]}"
    name = endpoint_name(env.client.namespace, queue)
    await env.client.operator_service.create_nexus_endpoint(CreateNexusEndpointRequest(spec=EndpointSpec(
        name=name, target=EndpointTarget(worker=EndpointTarget.Worker(namespace=machinery_namespace("default"),
                                                                        task_queue="somewhere-else")))))
    with pytest.raises(EndpointConflict, match=f"{name} targets namespace .* task queue 'somewhere-else'"):
        await ensure_endpoint(env.client, queue)


async def test_a_missing_machinery_namespace_is_an_error_naming_it(env) -> None:
    lonely = Client(**{**env.client.config(), "namespace": f"lonely-{uuid.uuid4().hex[:6]}"})
    with pytest.raises(EndpointConflict, match=r"lonely-\w+-machinery"):
        await ensure_endpoint(lonely, "q")


def test_endpoint_names_are_valid_and_tell_queues_apart() -> None:
    import re
    names = {endpoint_name(ns, q) for ns in ("default", "bifrost", "bifrost-machinery") for q in ("q", "a/b c", "x" * 300)}
    assert all(re.fullmatch(r"[a-zA-Z][a-zA-Z0-9-]*[a-zA-Z0-9]", n) and len(n) <= 64 for n in names), names
    assert endpoint_name("bifrost", "q") == endpoint_name("bifrost-machinery", "q")  # from either namespace
    assert len(names) == 6
