"""Worker Versioning: `bifrost worker` runs as one build of a Worker Deployment (docs/versioning.md).

A build is a deployment name (default `bifrost`) and a build id (default the installed package's version). Every
workflow is pinned to the build that started it (workflows/options.py), so a new build takes new work only once it
is the deployment's current version, and the old build finishes what it began, then drains."""

from __future__ import annotations

import asyncio
import logging
from importlib import metadata

from temporalio.api.deployment.v1 import WorkerDeploymentVersion as VersionProto
from temporalio.api.enums.v1 import VersionDrainageStatus, WorkerDeploymentVersionStatus
from temporalio.api.workflowservice.v1 import (
    DescribeWorkerDeploymentRequest,
    DescribeWorkerDeploymentVersionRequest,
    SetWorkerDeploymentCurrentVersionRequest,
)
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import WorkerDeploymentConfig

from worker.endpoints import machinery_client

DEFAULT_DEPLOYMENT = "bifrost"
REGISTER_WAIT = 30.0  # s for a new build's pollers to register it with the server before it can be made current
log = logging.getLogger("bifrost.worker")


class VersioningOptionError(ValueError):
    """A deployment name or build id the server would refuse (said at start-up, not at the first poll)."""


def default_build_id() -> str:
    """The installed bifrost package's version (a release is a build); `0.0.0-dev` when run from a bare checkout."""
    try:
        return metadata.version("bifrost")
    except metadata.PackageNotFoundError:
        return "0.0.0-dev"


def deployment_version(deployment: str, build_id: str) -> WorkerDeploymentVersion:
    """The version this worker serves; refuses names the server cannot take (a `.` in the deployment name, blanks)."""
    if not deployment or "." in deployment or not deployment.isprintable() or " " in deployment:
        raise VersioningOptionError(f"--deployment must be a non-empty name without dots or spaces, got {deployment!r}")
    if not build_id or not build_id.isprintable() or " " in build_id or len(build_id) > 255:
        raise VersioningOptionError(f"--build-id must be a non-empty id without spaces (255 characters at most), "
                                    f"got {build_id!r}")
    return WorkerDeploymentVersion(deployment_name=deployment, build_id=build_id)


def deployment_config(version: WorkerDeploymentVersion) -> WorkerDeploymentConfig:
    """Poll as `version`, every workflow pinned unless its definition says otherwise."""
    return WorkerDeploymentConfig(version=version, use_worker_versioning=True,
                                  default_versioning_behavior=VersioningBehavior.PINNED)


def _proto(version: WorkerDeploymentVersion) -> VersionProto:
    return VersionProto(deployment_name=version.deployment_name, build_id=version.build_id)


async def current_build(client: Client, deployment: str) -> str | None:
    """The build id of the deployment's current version; None when it has none (or does not exist yet)."""
    try:
        resp = await client.workflow_service.describe_worker_deployment(
            DescribeWorkerDeploymentRequest(namespace=client.namespace, deployment_name=deployment))
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    current = resp.worker_deployment_info.routing_config.current_deployment_version
    return current.build_id or None


async def make_current(client: Client, version: WorkerDeploymentVersion, *, identity: str = "bifrost worker") -> None:
    """Route new workflows to `version` (once its pollers have registered it; waits up to REGISTER_WAIT s)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + REGISTER_WAIT
    while True:
        try:
            await client.workflow_service.set_worker_deployment_current_version(SetWorkerDeploymentCurrentVersionRequest(
                namespace=client.namespace, deployment_name=version.deployment_name, build_id=version.build_id,
                identity=identity, ignore_missing_task_queues=True))
            return
        except RPCError as err:
            if loop.time() >= deadline or err.status not in (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION):
                raise
        await asyncio.sleep(0.5)  # a retry interval while the server registers the new build's pollers


async def settle_current(client: Client, version: WorkerDeploymentVersion, *, set_current: bool) -> str:
    """At start-up: make this build current when asked (`--set-current`) or when the deployment has none yet (a first
    install, a dev server); otherwise leave routing alone: a release engineer promotes a new build on purpose. Says
    what it did. The machinery namespace (stages, reports, the lock) follows: once this build is current in the
    namespace people open, it is made current there too."""
    said = await _settle(client, version, set_current=set_current)
    machinery = machinery_client(client)
    if await current_build(client, version.deployment_name) == version.build_id and \
            await current_build(machinery, version.deployment_name) != version.build_id:
        await make_current(machinery, version)
    return said


async def _settle(client: Client, version: WorkerDeploymentVersion, *, set_current: bool) -> str:
    current = await current_build(client, version.deployment_name)
    if current == version.build_id:
        return f"build {version.build_id} is the current version of deployment {version.deployment_name!r}"
    if set_current or current is None:
        await make_current(client, version)
        before = f" (was {current})" if current else " (it had none)"
        return f"made build {version.build_id} the current version of deployment {version.deployment_name!r}{before}"
    return (f"build {version.build_id} polls, but deployment {version.deployment_name!r} routes new workflows to build "
            f"{current}: make this build current with `bifrost worker --set-current` or `temporal worker deployment "
            f"set-current-version --deployment-name {version.deployment_name} --build-id {version.build_id}`")


async def drainage(client: Client, version: WorkerDeploymentVersion) -> tuple[str, str]:
    """A version's status (e.g. CURRENT, DRAINING, DRAINED) and drainage status (DRAINING, DRAINED, or UNSPECIFIED)."""
    resp = await client.workflow_service.describe_worker_deployment_version(DescribeWorkerDeploymentVersionRequest(
        namespace=client.namespace, deployment_version=_proto(version)))
    info = resp.worker_deployment_version_info
    status = WorkerDeploymentVersionStatus.Name(info.status).removeprefix("WORKER_DEPLOYMENT_VERSION_STATUS_")
    drained = VersionDrainageStatus.Name(info.drainage_info.status).removeprefix("VERSION_DRAINAGE_STATUS_")
    return status, drained
