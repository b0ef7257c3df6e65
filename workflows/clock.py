"""Waits computed from instants: never negative, so no timer fires in the past and no loop spins.

A wait computed as `deadline - now` is negative whenever the deadline has passed (or was computed wrongly,
as a deployment window across a daylight-saving fold once was): Temporal fires such a timer at once and a
loop that waits again spins through workflow tasks until the deadlock detector fails them. Every timer or
`wait_condition` timeout in workflows/ that comes from a difference goes through `wait_until`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

MIN_WINDOW_WAIT = timedelta(seconds=1)  # a loop that waits for a window again always lets virtual time pass


def wait_until(deadline: datetime, now: datetime, *, at_least: timedelta = timedelta(0)) -> timedelta:
    """How long to wait from `now` until `deadline`: never less than `at_least` (never negative)."""
    return max(deadline - now, at_least, timedelta(0))
