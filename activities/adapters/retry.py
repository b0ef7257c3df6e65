"""One client call tried again on passing failures, with exponential backoff and a heartbeat while it waits.

The routers (alb, gateway-api), Route 53, the Kubernetes deployer and Prometheus each talk to an API that throttles
and fails now and then; a short outage should cost a retry inside the activity, not a failed step. What counts as passing, and the words of the
failure, belong to each adapter (`failure`); how often and how long to wait is written once, here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from temporalio import activity

from activities.adapters.base import AdapterError

T = TypeVar("T")
E = TypeVar("E", bound=AdapterError)


@dataclass(frozen=True)
class Backoff:
    """Up to `attempts` tries; the wait before try n+1 is `first_seconds` x 2^(n-1), at most `max_seconds`."""

    attempts: int
    first_seconds: float
    max_seconds: float | None = None

    def delay(self, attempt: int) -> float:
        """The wait after failed try `attempt` (1-based)."""
        delay: float = self.first_seconds * 2 ** (attempt - 1)
        return delay if self.max_seconds is None else min(delay, self.max_seconds)


async def retrying(call: Callable[[], Awaitable[T]], *, retry_on: tuple[type[Exception], ...],
                   failure: Callable[[Exception, int], E], backoff: Backoff,
                   note: Callable[[E, int, float], str], logger: logging.Logger | None = None) -> T:
    """`call()`, tried up to `backoff.attempts` times.

    An exception of `retry_on` goes to `failure(err, attempt)`: it raises what must not be retried (a conflict, a
    refusal; it is inside the except block, so `raise ... from` chains as the adapter wants) and returns the
    adapter error of this try; a non-retryable one is raised at once, the last retryable one after the last try.
    Between tries the activity heartbeats `note(failure, attempt, delay)` (outside an activity: nothing) and
    `logger`, when given, logs the failure at info."""
    for attempt in range(1, backoff.attempts + 1):
        try:
            return await call()
        except retry_on as err:
            last = failure(err, attempt)
            if last.__cause__ is None:  # raised below, outside this block: keep the client's error as its cause
                last.__cause__, last.__suppress_context__ = err, True
        if not last.retryable or attempt == backoff.attempts:
            raise last
        delay = backoff.delay(attempt)
        if logger is not None:
            logger.info("%s; trying again in %.1f s", last, delay)
        if activity.in_activity():
            activity.heartbeat(note(last, attempt, delay))
        await asyncio.sleep(delay)
    raise ValueError(f"backoff.attempts must be at least 1, got {backoff.attempts}")
