"""Deployment windows: when may a region start a stage? Pure functions of a given instant."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from workflows.request import Region

_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


def is_open(region: Region, at: datetime) -> bool:
    """True when `at` falls inside one of the region's weekly windows and not on a freeze date."""
    local = at.astimezone(ZoneInfo(region.timezone))
    if local.date() in region.freeze_dates:
        return False
    if not region.windows:
        return True
    day = _DAYS[local.weekday()]
    t = local.time().replace(tzinfo=None)
    return any(day in w.days and w.start <= t < w.end for w in region.windows)


def next_open(region: Region, at: datetime) -> datetime | None:
    """The first instant at or after `at` when the region's window is open; None if never (within 400 days)."""
    if is_open(region, at):
        return at
    tz = ZoneInfo(region.timezone)
    local = at.astimezone(tz)
    candidates: list[datetime] = []
    for offset in range(0, 400):
        day = (local + timedelta(days=offset)).date()
        if day in region.freeze_dates:
            continue
        starts = [datetime.combine(day, w.start, tz) for w in region.windows if _DAYS[day.weekday()] in w.days]
        if not region.windows:
            starts = [datetime.combine(day, datetime.min.time(), tz)]
        candidates = [s for s in starts if s >= local]
        if candidates:
            return min(candidates).astimezone(at.tzinfo)
    return None
