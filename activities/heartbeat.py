"""Keep a long activity heartbeating, so a dead worker is noticed within seconds and cancellations arrive.

Temporal declares an activity lost only when its heartbeat timeout passes without a heartbeat, and it
delivers a cancellation to an async activity only in answer to a heartbeat. The SDK sends at most one
heartbeat per 0.8 × heartbeat timeout, so calling `activity.heartbeat` more often than that costs nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from temporalio import activity

DEFAULT_EVERY = 5.0  # seconds, when the activity has no heartbeat timeout (cancellations still need heartbeats)


def heartbeat_interval() -> float:
    """A quarter of the running activity's heartbeat timeout (at most DEFAULT_EVERY s), so beats arrive well in time."""
    timeout = activity.info().heartbeat_timeout
    if timeout is None or timeout.total_seconds() <= 0:
        return DEFAULT_EVERY
    return max(0.05, min(DEFAULT_EVERY, timeout.total_seconds() / 4))


@contextlib.asynccontextmanager
async def heartbeating(*details: object, every: float | None = None) -> AsyncIterator[None]:
    """Heartbeat with `details` every `every` seconds (default: `heartbeat_interval()`) while the body runs.

    Outside an activity, and in a local activity (which cannot heartbeat: the workflow task covers it), it
    does nothing. Heartbeats the body sends itself (e.g. the Kubernetes deployer's rollout progress) still
    go through; this only guarantees that some heartbeat is sent in time."""
    if not activity.in_activity() or activity.info().is_local:
        yield
        return
    interval = every if every is not None else heartbeat_interval()

    async def beat() -> None:
        while True:
            activity.heartbeat(*details)
            await asyncio.sleep(interval)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
