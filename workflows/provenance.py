"""Ids are claims, not proof: the one check every workflow makes of the id it runs under, against its own input.

A workflow whose meaning depends on its id (one rollout of a service version, one revert, one lock, one traffic
change of a service) refuses to run under an id that says something its input does not. The refusal is an
InvalidPayload failure (no stack trace, non-retryable), raised before the run does anything, so a run started by
hand under a made-up id changes nothing and wedges nothing."""

from __future__ import annotations

from temporalio.exceptions import ApplicationError

from common.failures import INVALID_PAYLOAD
from common.problems import show


def require_own_id(actual: str, expected: str, *, what: str, suffixed: bool = False) -> None:
    """Fail the run unless it runs as `expected` (or, with `suffixed`, as `expected/<anything>`).

    `suffixed` admits ids that only add to the canonical one (tests run several rollouts of one version side by
    side as `rollout/<service>/<version>/<n>`); such an id still names its own service and version truthfully."""
    if actual == expected or (suffixed and actual.startswith(expected + "/")):
        return
    raise ApplicationError(f"workflow id: {what} must run as {show(expected, 200)}, not {show(actual, 200)}; "
                           f"nothing was done", type=INVALID_PAYLOAD, non_retryable=True)
