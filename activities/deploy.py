"""Deploy activities: thin, idempotent wrappers that route each stage to its deployer."""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.adapters import DeployError
from activities.models import DeployInput, PromoteInput, PromoteResult, RollbackInput, StageOnly
from activities.registry import AdapterRegistry


def _as_application_error(err: DeployError) -> ApplicationError:
    return ApplicationError(str(err), type="DeployError", non_retryable=not err.retryable)


class DeployActivities:
    """Holds the adapter registry; each method is one activity with one input."""

    def __init__(self, registry: AdapterRegistry) -> None:
        self.registry = registry

    @activity.defn(name="current_version")
    async def current_version(self, inp: StageOnly) -> str | None:
        try:
            return await self.registry.deployer(inp.stage).current_version(inp.stage)
        except DeployError as err:
            raise _as_application_error(err) from err

    @activity.defn(name="deploy_canary")
    async def deploy_canary(self, inp: DeployInput) -> None:
        await self._deploy(inp, "canary")

    @activity.defn(name="deploy_baseline")
    async def deploy_baseline(self, inp: DeployInput) -> None:
        await self._deploy(inp, "baseline")

    async def _deploy(self, inp: DeployInput, role: str) -> None:
        activity.logger.info("deploy %s %s to %s", role, inp.version, inp.stage.key)
        try:
            await self.registry.deployer(inp.stage).deploy(inp.stage, role, inp.version, inp.image, inp.replicas)  # type: ignore[arg-type]
        except DeployError as err:
            raise _as_application_error(err) from err

    @activity.defn(name="promote")
    async def promote(self, inp: PromoteInput) -> PromoteResult:
        try:
            previous = await self.registry.deployer(inp.stage).promote(inp.stage, inp.version, inp.image)
        except DeployError as err:
            raise _as_application_error(err) from err
        return PromoteResult(previous_version=previous)

    @activity.defn(name="rollback")
    async def rollback(self, inp: RollbackInput) -> None:
        activity.logger.info("rollback %s to %s: %s", inp.stage.key, inp.to_version, inp.reason)
        deployer = self.registry.deployer(inp.stage)
        try:
            await deployer.rollback(inp.stage, inp.to_version, inp.image)
            await deployer.cleanup(inp.stage)
        except DeployError as err:
            raise _as_application_error(err) from err

    @activity.defn(name="cleanup")
    async def cleanup(self, inp: StageOnly) -> None:
        try:
            await self.registry.deployer(inp.stage).cleanup(inp.stage)
        except DeployError as err:
            raise _as_application_error(err) from err
