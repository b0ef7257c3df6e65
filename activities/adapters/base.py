"""What every target adapter implements, and the one error type adapters raise.

Activities call these; adapters do the I/O. Adapters must be idempotent: calling a method twice leaves
the target as calling it once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from http import HTTPStatus
from typing import ClassVar, Protocol, runtime_checkable

from activities.adapters.secrets import redact
from canary.config import MetricSamples, MetricSpec
from common.failures import AdapterErrorKind
from common.types import MetricWindow, Role, StageRef

MAX_DETAIL = 300  # characters of a server's own explanation kept in a message


def one_line(text: object, limit: int | None = None) -> str:
    """`text` on one line for a human: credentials redacted (see `secrets.redact`), every run of whitespace
    (newlines included) collapsed to one space, cut to `limit` characters. Every adapter error passes here."""
    flat = re.sub(r"\s+", " ", redact(str(text))).strip()
    if limit is not None and len(flat) > limit:
        flat = flat[: limit - 1].rstrip() + "…"
    return flat


def http_status(code: int) -> str:
    """'403 Forbidden' for 403; 'HTTP 599' for a code without a standard name."""
    try:
        return f"{code} {HTTPStatus(code).phrase}"
    except ValueError:
        return f"HTTP {code}"


class AdapterError(Exception):
    """A target could not do what was asked. `retryable=False` means retrying cannot help.

    `str(err)` is one line a human can act on, built here from the fields:
    "<operation>: <status> on <target> (<detail>) — <hint>". `operation` says what failed, `target` the
    object (e.g. "DELETE deployments/shop/checkout-canary"), `status` the HTTP status or AWS error code,
    `detail` the server's own explanation (cut to MAX_DETAIL characters) and `hint` what to do. Only
    `operation` is required: an error with no other field is that one sentence.

    `kind` is the ApplicationError type it leaves an activity as (common/failures.py's table): a subclass
    declares its own or inherits its parent's, so a new error class is never a type the table lacks.
    """

    kind: ClassVar[AdapterErrorKind] = "AdapterError"

    def __init__(
        self,
        operation: str,
        *,
        target: str | None = None,
        status: str | int | None = None,
        detail: str | None = None,
        hint: str | None = None,
        retryable: bool = True,
    ) -> None:
        self.operation = one_line(operation)
        self.target = one_line(target) if target else None
        self.status = (http_status(status) if isinstance(status, int) else one_line(status)) if status else None
        self.detail = one_line(detail, MAX_DETAIL) if detail else None
        if self.detail and self.status and self.detail.lower() in self.status.lower():
            self.detail = None  # e.g. a body that only says "Unauthorized" under "401 Unauthorized"
        self.hint = one_line(hint) if hint else None
        self.retryable = retryable
        super().__init__(self._line())

    def _line(self) -> str:
        line = self.operation
        if self.status and self.target:
            line += f": {self.status} on {self.target}"
        elif self.status or self.target:
            line += f": {self.status or self.target}"
        if self.detail:
            line += f" ({self.detail})"
        if self.hint:
            line += f" — {self.hint}"
        return line

    def fields(self) -> dict[str, str | bool | None]:
        """The structured fields, for a Temporal failure's details and for logs."""
        return {"operation": self.operation, "target": self.target, "status": self.status, "detail": self.detail,
                "hint": self.hint, "retryable": self.retryable}


class DeployError(AdapterError):
    """A deploy step failed (bad image, forbidden, not found, rollout stuck, API down)."""

    kind = "DeployError"


class MetricsError(AdapterError):
    """Metrics could not be read (bad query, permissions, source down)."""

    kind = "MetricsError"


class TrafficError(AdapterError):
    """Traffic weights could not be read or set (unknown record, invalid weights, DNS API down)."""

    kind = "TrafficError"


class NotifyError(AdapterError):
    """A notification was not delivered. The notifier logs it and never raises it: chat must not fail a rollout."""

    kind = "NotifyError"


class ReportError(AdapterError):
    """A report could not be stored (folder not writable, bucket missing or forbidden, S3 down) or linked."""

    kind = "ReportError"


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


@dataclass(frozen=True)
class Autoscaler:
    """The autoscaler that owns a primary's replica count (a HorizontalPodAutoscaler): its name and bounds."""

    name: str
    min_replicas: int
    max_replicas: int


@runtime_checkable
class Autoscaling(Protocol):
    """A deployer whose primaries an autoscaler may scale: pre-warm then raises the autoscaler's floor, since a
    replica count set on the primary would be undone by it."""

    async def autoscaler(self, stage: StageRef) -> Autoscaler | None:
        """The autoscaler scaling the stage's primary, or None when nothing does."""

    async def set_min_replicas(self, stage: StageRef, autoscaler: str, min_replicas: int, *, wait: bool) -> None:
        """Set the autoscaler's floor; with `wait`, return once the primary runs at least that many ready replicas."""


def autoscaling(deployer: object) -> Autoscaling | None:
    """The deployer as `Autoscaling`, or None when its kind has no autoscalers (simulated, test doubles)."""
    return deployer if isinstance(deployer, Autoscaling) else None


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
