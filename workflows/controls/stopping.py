"""Stopping: the exception that unwinds a workflow to its stop handling, and a wait a cancellation cannot cut short."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow


class Stopped(Exception):
    """Internal: the workflow was told to stop (abort, reject, supersede, cancel); unwinds to its stop handling."""


async def until(condition: Callable[[], bool], timeout: timedelta | None = None, summary: str | None = None, *,
                on_cancel: Callable[[], None]) -> bool:
    """Wait for `condition` (True) or the timeout (False) without being cut short by a cancellation request,
    which goes to `on_cancel` (it may make `condition` true): for waits the workflow must finish."""
    while True:
        try:
            await workflow.wait_condition(condition, timeout=timeout, timeout_summary=summary or None)
            return True
        except TimeoutError:
            return False
        except asyncio.CancelledError:
            on_cancel()
            if condition():
                return True
