"""What every target adapter implements, and the one error type adapters raise.

Activities call these; adapters do the I/O. Adapters must be idempotent: calling a method twice leaves
the target as calling it once.
"""

from __future__ import annotations

from typing import Protocol

from canary.config import MetricSamples, MetricSpec
from common.types import MetricWindow, Role, StageRef


class AdapterError(Exception):
    """A target could not do what was asked. `retryable=False` means retrying cannot help.

    The message is one line a human can act on: what failed, on which object, and what to do."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class DeployError(AdapterError):
    """A deploy step failed (bad image, forbidden, not found, rollout stuck, API down)."""


class MetricsError(AdapterError):
    """Metrics could not be read (bad query, permissions, source down)."""


class TrafficError(AdapterError):
    """Traffic weights could not be read or set (unknown record, invalid weights, DNS API down)."""


class Deployer(Protocol):
    """Runs versions of a service in one region and environment, in three roles."""

    async def current_version(self, stage: StageRef) -> str | None: ...

    async def deploy(self, stage: StageRef, role: Role, version: str, image: str | None, replicas: int) -> None:
        """Run `version` in `role` ('canary' or 'baseline') and wait until it is available.

        `image` is None for a baseline: copy the primary's current pod template."""

    async def promote(self, stage: StageRef, version: str, image: str) -> str | None:
        """Make `version` the primary; return the version it replaced (None if there was none)."""

    async def rollback(self, stage: StageRef, to_version: str | None, image: str | None) -> None:
        """Restore the primary to `to_version`; a no-op when it already runs it."""

    async def cleanup(self, stage: StageRef) -> None:
        """Remove canary and baseline; a no-op when they are gone."""


class MetricSource(Protocol):
    """Reads samples of one metric for two roles over a window."""

    async def fetch(
        self,
        stage: StageRef,
        metric: MetricSpec,
        window: MetricWindow,
        baseline: tuple[Role, str | None],
        canary: tuple[Role, str],
    ) -> MetricSamples:
        """Samples per interval for the baseline and canary sides; empty lists mean no data."""
