"""Deployment windows: when may a region start a stage? Pure functions of a given instant.

A window is wall-clock time in the region's IANA zone: a stage may start while the zone's clocks show a time
inside one of its windows, on one of its days, on a date that is not frozen. Across a daylight-saving change
the wall clock jumps (a gap: 02:30 never happens) or repeats (a fold: 01:30 happens twice). So the next
opening is searched among real instants (UTC): each window's start in both folds, and each instant the zone's
offset changes, and the first one at or after the given instant at which `is_open` holds is the answer. It is
never in the past, and the wall clock there is inside a window (docs/security.md §2).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from workflows.request import Region, RolloutRequest

_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
HORIZON_DAYS = 400  # how far `next_open` looks
MAX_WAIT_DAYS = 31  # `plan` refuses a region whose window does not open within this many days (docs/request.md)
_PAD = timedelta(hours=3)  # UTC offsets change by at most 2 h at once; a local day lies within its UTC day +- this
_RESOLUTION = timedelta(microseconds=1)


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


def _offset_changes(tz: ZoneInfo, start: datetime, end: datetime) -> Iterator[datetime]:
    """The instants in (start, end] at which the zone's UTC offset changes, each found to the microsecond."""
    def offset(t: datetime) -> timedelta | None:
        return t.astimezone(tz).utcoffset()

    if offset(start) == offset(end):
        return  # zones change their offset at most once a day (tzdata has no exception in use)
    t = start
    while t < end:
        nxt = min(t + timedelta(hours=1), end)
        if offset(t) != offset(nxt):
            lo, hi = t, nxt
            while hi - lo > _RESOLUTION:
                mid = lo + (hi - lo) / 2
                lo, hi = (mid, hi) if offset(mid) == offset(lo) else (lo, mid)
            yield hi
        t = nxt


def _openings(region: Region, tz: ZoneInfo, day: date) -> Iterator[datetime]:
    """Every instant (UTC) at which the region may open on the local `day`: a window's start in either fold of a
    repeated hour, local midnight, or a change of the zone's offset (the clock jumping into a window)."""
    starts = [w.start for w in region.windows if _DAYS[day.weekday()] in w.days] if region.windows else [time(0)]
    for start in starts:
        for fold in (0, 1):
            yield datetime.combine(day, start, tz).replace(fold=fold).astimezone(UTC)
    midnight = datetime.combine(day, time(0), tz).astimezone(UTC)
    yield from _offset_changes(tz, midnight - _PAD, midnight + timedelta(days=1) + _PAD)


def next_open(region: Region, at: datetime) -> datetime | None:
    """The first instant at or after `at` when the region's window is open; None if never (within 400 days)."""
    if is_open(region, at):
        return at
    tz = ZoneInfo(region.timezone)
    first_day = at.astimezone(tz).date()
    found: list[datetime] = []
    for offset in range(HORIZON_DAYS + 1):
        day = first_day + timedelta(days=offset)
        if day in region.freeze_dates:
            continue
        found += [t for t in _openings(region, tz, day) if t >= at and is_open(region, t)]
        if found and day > min(found).astimezone(tz).date():
            break  # a later local day can still open earlier in UTC only across a backward jump over midnight
    return min(found).astimezone(at.tzinfo) if found else None


def window_problems(request: RolloutRequest, now: datetime) -> list[str]:
    """Regions whose window does not open within MAX_WAIT_DAYS of `now`, one line each naming the field and the
    first opening, if there is one: a rollout would wait for them holding its service's lock."""
    out = []
    for r in request.regions:
        if not r.windows and not r.freeze_dates:
            continue
        first = next_open(r, now)
        if first is not None and first - now <= timedelta(days=MAX_WAIT_DAYS):
            continue
        field = f"regions.{r.name}.{'windows' if r.windows else 'freeze_dates'}"
        when = (f"it first opens {first.astimezone(ZoneInfo(r.timezone)):%a %Y-%m-%d %H:%M} {r.timezone}, "
                f"{(first - now).days} days from now" if first is not None else
                f"it does not open within {HORIZON_DAYS} days")
        out.append(f"{field}: a stage in {r.name} must be able to start within {MAX_WAIT_DAYS} days, but {when} "
                   f"(now {now.astimezone(UTC):%Y-%m-%d %H:%M} UTC); add days or hours to its windows, or "
                   "remove freeze dates")
    return out
