"""Deploy activities: thin, idempotent wrappers that route each stage to its deployer.

Each one heartbeats while it runs (see activities/heartbeat.py), whatever its deployer does, so a dead
worker is noticed within the heartbeat timeout of workflows/options.py and another worker takes over."""

from __future__ import annotations

from temporalio import activity

from activities.adapters.base import AdapterError
from activities.adapters.registry import AdapterRegistry
from activities.errors import reports_adapter_errors
from activities.heartbeat import heartbeating
from activities.models import DeployInput, PromoteInput, PromoteResult, RollbackInput, RollbackResult, StageOnly
from common.types import StageRef


class DeployActivities:
    """Holds the adapter registry; each method is one activity with one input."""

    def __init__(self, registry: AdapterRegistry) -> None:
        self.registry = registry

    @activity.defn
    @reports_adapter_errors
    async def current_version(self, inp: StageOnly) -> str | None:
        """The version the stage's primary runs now (None when there is no primary yet)."""
        async with heartbeating(f"read version in {inp.stage.key}"):
            return await self.registry.deployer(inp.stage).current_version(inp.stage)

    @activity.defn
    @reports_adapter_errors
    async def deploy_canary(self, inp: DeployInput) -> None:
        """Run the new version as the canary beside the primary, and wait until it is available."""
        activity.logger.info("deploy canary %s to %s", inp.version, inp.stage.key)
        async with heartbeating(f"deploy canary {inp.version} to {inp.stage.key}"):
            await self.registry.deployer(inp.stage).deploy(inp.stage, "canary", inp.version, inp.image, inp.replicas)

    @activity.defn
    @reports_adapter_errors
    async def deploy_baseline(self, inp: DeployInput) -> None:
        """Run a fresh copy of the current version as the baseline, and wait until it is available."""
        activity.logger.info("deploy baseline %s to %s", inp.version, inp.stage.key)
        async with heartbeating(f"deploy baseline {inp.version} to {inp.stage.key}"):
            await self.registry.deployer(inp.stage).deploy(inp.stage, "baseline", inp.version, inp.image, inp.replicas)

    @activity.defn
    @reports_adapter_errors
    async def promote(self, inp: PromoteInput) -> PromoteResult:
        """Make the new version the primary; report the version it replaced (and, with `cleanup`, remove
        canary and baseline: a cleanup that cannot succeed is reported, never undoing the promotion)."""
        async with heartbeating(f"promote {inp.version} in {inp.stage.key}"):
            previous = await self.registry.deployer(inp.stage).promote(inp.stage, inp.version, inp.image)
            cleanup_error = await self._cleanup(inp.stage) if inp.cleanup else None
        return PromoteResult(previous_version=previous, cleanup_error=cleanup_error)

    @activity.defn
    @reports_adapter_errors
    async def rollback(self, inp: RollbackInput) -> RollbackResult:
        """Put the primary back on the version it ran before, then remove canary and baseline."""
        activity.logger.info("rollback %s to %s: %s", inp.stage.key, inp.to_version, inp.reason)
        async with heartbeating(f"roll back {inp.stage.key} to {inp.to_version}"):
            await self.registry.deployer(inp.stage).rollback(inp.stage, inp.to_version, inp.image)
            return RollbackResult(cleanup_error=await self._cleanup(inp.stage))

    async def _cleanup(self, stage: StageRef) -> str | None:
        """Remove canary and baseline; a refusal that retrying cannot fix (e.g. a forbidden DELETE) is returned
        as a one-line reason, so the caller records what it did achieve. Retryable errors are raised."""
        try:
            await self.registry.deployer(stage).cleanup(stage)
        except AdapterError as err:
            if err.retryable:
                raise
            return str(err)
        return None

    @activity.defn
    @reports_adapter_errors
    async def cleanup(self, inp: StageOnly) -> None:
        """Remove canary and baseline (a no-op when they are gone)."""
        async with heartbeating(f"remove canary and baseline in {inp.stage.key}"):
            await self.registry.deployer(inp.stage).cleanup(inp.stage)
