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

    async def replicas(self, stage: StageRef) -> int:
        """How many replicas the stage's primary is asked to run now (its desired count)."""

    async def scale(self, stage: StageRef, replicas: int) -> None:
        """Set the primary's replica count and wait until that many are ready; a no-op when already there."""


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


class TrafficRouter(Protocol):
    """One weighted record set: every region's record of a service, told apart by set identifier.

    Changes are atomic across the set and guarded: with `expect`, a router refuses (retryable) when the
    weights it reads differ, so two movers never silently overwrite each other."""

    @property
    def name(self) -> str:
        """The record set in words, for messages (e.g. `Route 53 api.example.com. CNAME in zone Z123`)."""

    async def weights(self) -> dict[str, int]:
        """The weight of every record, by set identifier; raises a non-retryable TrafficError when there are none."""

    async def set_weights(self, wanted: dict[str, int], *, expect: dict[str, int] | None = None) -> dict[str, int]:
        """Set some or all weights in one change, wait until it is live, and return the weights read back."""

    async def ttl_seconds(self) -> int:
        """How long resolvers may cache an answer: the longest TTL of the set's records."""
