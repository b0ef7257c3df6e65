"""The two namespaces a worker serves, on one connection, and the Nexus endpoint a rollout reaches its stages by.

The worker creates the endpoint when it starts (idempotent: one that exists and targets the same place is fine;
one of that name that targets somewhere else is a clear error, never silently reused)."""

from __future__ import annotations

from temporalio.api.nexus.v1 import Endpoint, EndpointSpec, EndpointTarget
from temporalio.api.operatorservice.v1 import CreateNexusEndpointRequest, ListNexusEndpointsRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from common.namespaces import endpoint_name, machinery_namespace


class EndpointConflict(RuntimeError):
    """A Nexus endpoint of the name Bifrost derives exists and targets another namespace or task queue, or it
    cannot be created (e.g. the machinery namespace does not exist)."""


def machinery_client(client: Client) -> Client:
    """A client for the machinery namespace of `client`'s namespace, on the same connection and with the same
    converter and interceptors (a time-skipping test client stamps the stages it starts too)."""
    config = client.config()
    config["namespace"] = machinery_namespace(client.namespace)
    return Client(**config)


def _target(endpoint: Endpoint) -> tuple[str, str]:
    worker = endpoint.spec.target.worker
    return worker.namespace, worker.task_queue


async def _find(client: Client, name: str) -> Endpoint | None:
    req = ListNexusEndpointsRequest(name=name, page_size=1)
    found = await client.operator_service.list_nexus_endpoints(req)
    return next((e for e in found.endpoints if e.spec.name == name), None)


async def ensure_endpoint(client: Client, task_queue: str) -> str:
    """Create (or find) the endpoint of (`client.namespace`, `task_queue`) targeting the machinery namespace's
    queue of the same name; return its name. Raise EndpointConflict if that name targets somewhere else."""
    name = endpoint_name(client.namespace, task_queue)
    want = (machinery_namespace(client.namespace), task_queue)
    spec = EndpointSpec(name=name, description=None, target=EndpointTarget(
        worker=EndpointTarget.Worker(namespace=want[0], task_queue=want[1])))
    try:
        await client.operator_service.create_nexus_endpoint(CreateNexusEndpointRequest(spec=spec))
        return name
    except RPCError as err:
        if err.status != RPCStatusCode.ALREADY_EXISTS:
            raise EndpointConflict(
                f"could not create the Nexus endpoint {name} (namespace {want[0]!r}, task queue {want[1]!r}): "
                f"{err.message}; create the namespace {want[0]!r} (docs/operating.md) and give the worker the right to "
                "create endpoints, or create the endpoint once by hand") from err
    existing = await _find(client, name)
    if existing is None:  # removed between the two calls: try once more
        await client.operator_service.create_nexus_endpoint(CreateNexusEndpointRequest(spec=spec))
        return name
    if _target(existing) != want:
        raise EndpointConflict(
            f"the Nexus endpoint {name} targets namespace {_target(existing)[0]!r}, task queue {_target(existing)[1]!r}; "
            f"Bifrost needs it to target {want[0]!r}, {want[1]!r} (delete it with `temporal operator nexus endpoint "
            f"delete --name {name}` if it is stale)")
    return name
