"""Deployment windows across daylight-saving gaps and folds, and windows that never open (issue #17 item 2)."""

from __future__ import annotations

import asyncio
import functools
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.workflows.helpers import make_request
from workflows.clock import wait_until
from workflows.plan import PlanError, build_plan
from workflows.request import MIN_WINDOW, DeployWindow, Region, RequestError, load_request
from workflows.windows import MAX_WAIT_DAYS, is_open, next_open, window_problems

NY = "America/New_York"
EXAMPLES = Path(__file__).parents[2] / "deploy" / "examples"

# zones with a daylight-saving change, whole-hour and not (Lord Howe moves by 30 min), both hemispheres, and a
# zone that changed its offset at midnight (America/Santiago, whose clocks jump from 00:00 to 01:00)
ZONES = [NY, "Europe/Dublin", "Europe/Berlin", "Australia/Sydney", "Australia/Lord_Howe", "America/Santiago",
         "Asia/Tehran", "Africa/Casablanca", "Pacific/Chatham", "America/St_Johns", "UTC", "Asia/Kolkata"]
DAYS = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]


def region(tz: str, *windows: dict, freeze: list[date] | None = None) -> Region:
    return Region(name="r1", timezone=tz, windows=[DeployWindow(**w) for w in windows], freeze_dates=freeze or [],
                  environments=["prod"], traffic_share=1.0)


@functools.cache
def transitions(tz: str, year: int) -> list[datetime]:
    """The instants (UTC) at which `tz` changes its offset in `year`, by scanning hour by hour."""
    z, out = ZoneInfo(tz), []
    t = datetime(year, 1, 1, tzinfo=UTC)
    while t.year == year:
        if t.astimezone(z).utcoffset() != (t + timedelta(hours=1)).astimezone(z).utcoffset():
            out.append(t + timedelta(hours=1))
        t += timedelta(hours=1)
    return out


def test_the_repeated_hour_of_a_fold_opens_in_the_future():
    # 2026-11-01 is the first Sunday of November: New York's clocks go from 01:59 EDT back to 01:00 EST
    r = region(NY, {"days": ["sun"], "start": "01:30", "end": "01:45"})
    at = datetime(2026, 11, 1, 6, 20, tzinfo=UTC)  # 01:20 EST, the second 01:20 of the night
    opens = next_open(r, at)
    assert opens == datetime(2026, 11, 1, 6, 30, tzinfo=UTC)  # 01:30 EST; the old code said 05:30 (EDT), 50 min ago
    assert opens.astimezone(ZoneInfo(NY)).time() == time(1, 30) and is_open(r, opens)


def test_a_window_that_starts_in_a_gap_opens_when_the_clock_jumps_into_it():
    # 2027-03-14: New York's clocks go from 01:59 EST to 03:00 EDT; 02:30 does not happen that night
    r = region(NY, {"days": ["sun"], "start": "02:30", "end": "04:00"})
    opens = next_open(r, datetime(2027, 3, 14, 6, 50, tzinfo=UTC))  # 01:50 EST
    assert opens == datetime(2027, 3, 14, 7, 0, tzinfo=UTC)  # 03:00 EDT, the first instant inside the window


def test_a_window_inside_a_gap_waits_for_the_next_week():
    r = region(NY, {"days": ["sun"], "start": "02:15", "end": "02:45"})
    opens = next_open(r, datetime(2027, 3, 14, 6, 50, tzinfo=UTC))
    assert opens == datetime(2027, 3, 21, 6, 15, tzinfo=UTC)


def _hhmm(minutes: int) -> str:
    minutes = max(0, min(minutes, 23 * 60 + 59))
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


@st.composite
def cases(draw: st.DrawFn) -> tuple[Region, datetime]:
    """A region with up to three windows and some freeze dates, and an instant; half of them next to one of the
    zone's offset changes, with a window that starts near the wall clock of the change (in a gap or a fold)."""
    tz = draw(st.sampled_from(ZONES))
    z = ZoneInfo(tz)
    windows = []
    for _ in range(draw(st.integers(0, 3))):
        start = draw(st.integers(0, 23 * 60 + 58))
        end = draw(st.integers(start + 1, min(start + 6 * 60, 23 * 60 + 59)))
        days = draw(st.lists(st.sampled_from(DAYS), min_size=1, max_size=7, unique=True))
        windows.append({"days": days, "start": _hhmm(start), "end": _hhmm(end)})
    year = draw(st.sampled_from([2026, 2027]))
    changes = transitions(tz, year)
    near = bool(changes) and draw(st.integers(0, 3)) > 0
    if near:
        change = draw(st.sampled_from(changes))
        at = change + timedelta(minutes=draw(st.integers(-90, 90)), seconds=draw(st.integers(0, 59)))
        wall = (change + timedelta(minutes=draw(st.integers(-90, 90)))).astimezone(z)
        start = wall.hour * 60 + wall.minute
        if start < 23 * 60 + 59:
            end = draw(st.integers(start + 1, min(start + 120, 23 * 60 + 59)))
            windows.append({"days": DAYS, "start": _hhmm(start), "end": _hhmm(end)})
    else:
        at = datetime(year, 1, 1, tzinfo=UTC) + timedelta(minutes=draw(st.integers(0, 730 * 24 * 60)))
    local_day = at.astimezone(z).date()
    freeze = sorted({local_day + timedelta(days=d) for d in draw(st.lists(st.integers(2 if near else -1, 20), max_size=10))})
    return region(tz, *windows, freeze=freeze), at


@settings(max_examples=200, deadline=None)
@given(cases())
def test_the_next_opening_is_never_past_and_is_inside_a_window_by_the_wall_clock(case):
    r, at = case
    opens = next_open(r, at)
    assert opens is not None  # every case has a window day that is not frozen within 3 weeks
    assert opens >= at
    assert is_open(r, opens)
    local = opens.astimezone(ZoneInfo(r.timezone))
    assert local.date() not in r.freeze_dates
    if r.windows:
        assert any(DAYS[local.weekday()] in w.days and w.start <= local.time() < w.end for w in r.windows)
    # and it is the first: no instant between `at` and the opening is open (sampled each minute, at most 2 days)
    t = at
    while t < min(opens, at + timedelta(days=2)):
        assert not is_open(r, t), f"open at {t} before the computed opening {opens}"
        t += timedelta(minutes=1)


@settings(max_examples=100, deadline=None)
@given(st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)),
       st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)))
def test_no_wait_is_negative(deadline, now):
    assert wait_until(deadline, now) >= timedelta(0)
    assert wait_until(deadline, now, at_least=timedelta(seconds=1)) >= timedelta(seconds=1)
    if deadline > now:
        assert wait_until(deadline, now) == deadline - now


NOW = datetime(2026, 12, 1, 18, 0, tzinfo=UTC)  # a Tuesday


def _request(**region: object):
    return make_request(regions=[{"name": "us-east-1", "traffic_share": 1.0, "environments": ["prod"], **region}],
                        blast_radius={"canary_region": None})


def test_plan_refuses_windows_whose_days_are_all_frozen_naming_the_field_and_the_first_opening():
    # Mondays only, and the next six Mondays frozen: the first opening is seven weeks away
    mondays = [date(2026, 12, 7) + timedelta(weeks=k) for k in range(6)]
    req = _request(windows=[{"days": ["mon"], "start": "10:00", "end": "12:00"}], freeze_dates=mondays)
    with pytest.raises(PlanError) as err:
        build_plan(req, now=NOW)
    assert err.value.rule == "regions.us-east-1.windows"
    assert f"within {MAX_WAIT_DAYS} days" in str(err.value)
    assert "first opens Mon 2027-01-18 10:00 UTC" in str(err.value)
    assert build_plan(req) is not None  # without a clock (a pure plan), only the blast-radius rules apply


def test_plan_refuses_a_region_frozen_for_longer_than_it_looks():
    every_day = [date(2026, 12, 1) + timedelta(days=d) for d in range(402)]
    problems = window_problems(_request(freeze_dates=every_day), NOW)
    assert len(problems) == 1 and problems[0].startswith("regions.us-east-1.freeze_dates: ")
    assert "does not open within 400 days" in problems[0]


def test_plan_accepts_a_window_that_opens_within_the_bound():
    req = _request(windows=[{"days": ["mon"], "start": "10:00", "end": "12:00"}],
                   freeze_dates=[date(2026, 12, 7) + timedelta(weeks=k) for k in range(3)])
    assert window_problems(req, NOW) == []  # opens Mon 2026-12-28, 27 days away


def test_a_window_too_short_to_start_in_is_refused_naming_the_field():
    with pytest.raises(RequestError) as err:
        _request(windows=[{"start": "09:00:00", "end": "09:00:00.000001"}])  # one microsecond
    assert "regions.0.windows.0" in str(err.value) and f"at least {MIN_WINDOW.total_seconds():g} s" in str(err.value)
    _request(windows=[{"start": "09:00", "end": "09:01"}])  # a minute is enough


@pytest.mark.parametrize("example", [EXAMPLES / n for n in ("demo-good.yaml", "demo-bad.yaml", "request.yaml")], ids=lambda p: p.name)
def test_the_examples_still_plan_at_any_time_of_the_week(example):
    req = load_request(example)
    for hours in range(0, 7 * 24, 5):
        build_plan(req, now=NOW + timedelta(hours=hours))


async def test_a_rollout_waits_through_a_fold_and_starts_inside_its_window(ts_env, task_queue, tmp_path):
    """On the time-skipping dev server: held by a pause until 01:05 EST on 2027-11-07, the second 01:05 of the night
    New York's clocks fall back, a stage with a 01:30-01:45 window waits 25 minutes (not -35) and starts at 01:30 EST;
    queries and updates answer all along."""
    from bifrost_cli.ops import outcome
    from tests.workflows.helpers import fleet, running_worker, start
    from tests.workflows.test_controls import wait_for
    from workflows.rollout.updates import Pause, Resume
    from workflows.rollout.workflow import RolloutWorkflow

    # today (in New York) is frozen, so the rollout waits for a later day's window whatever the time of the run:
    # without it the test failed every day from 06:30 to 06:45 UTC (01:30-01:45 EST), while the window was open
    today = datetime.now(UTC).astimezone(ZoneInfo(NY)).date()
    req = make_request(regions=[{"name": "us-east-1", "traffic_share": 1.0, "environments": ["prod"], "timezone": NY,
                                 "windows": [{"days": DAYS, "start": "01:30", "end": "01:45"}],
                                 "freeze_dates": [today.isoformat()]}],
                       blast_radius={"canary_region": None})
    after_fold = datetime(2027, 11, 7, 6, 5, tzinfo=UTC)  # 01:05 EST; 01:05 EDT was an hour before
    assert after_fold.astimezone(ZoneInfo(NY)).date() != today
    async with running_worker(ts_env.client, fleet(), task_queue, tmp_path):
        with ts_env.with_time_skipping_disabled():
            h = await start(ts_env.client, req, task_queue)
        await wait_for(h, lambda s: s.status == "waiting_window")
        await h.execute_update(RolloutWorkflow.pause, Pause(by="carol", reason="hold until the fold"))
        assert await ts_env.fast_forward(h, after_fold - await ts_env.get_current_time(h))
        await wait_for(h, lambda s: s.status == "paused")
        await h.execute_update(RolloutWorkflow.resume, Resume(by="carol"))
        state = await wait_for(h, lambda s: s.status == "waiting_window")
        assert "opens 2027-11-07 06:30 UTC" in (state.waiting_for or "")  # 01:30 EST, in 25 minutes
        await ts_env.fast_forward(h, timedelta(minutes=30))  # False: the rollout finished within it
        result = await outcome(h)
    assert result.status == "succeeded", result.reason
    resumed = next(a.at for a in result.audit if a.action == "resume")
    started = result.stages[0].launched_at  # by the rollout's clock (a stage started through Nexus has its own)
    assert started is not None and resumed >= after_fold and started >= resumed
    local = started.astimezone(ZoneInfo(NY))
    assert time(1, 30) <= local.time() < time(1, 45) and local.utcoffset() == timedelta(hours=-5)  # 01:3x EST


async def test_a_rollout_started_by_hand_with_a_window_that_never_opens_fails_at_once(env, task_queue, tmp_path):
    """The workflow checks its own input (a start from the UI skips `bifrost plan`): nothing deployed, no lock held."""
    from bifrost_cli.ops import outcome
    from tests.workflows.helpers import fleet, running_worker, start

    today = datetime.now(UTC).date()
    req = _request(freeze_dates=[today + timedelta(days=d) for d in range(-1, 401)])
    f = fleet()
    async with running_worker(env.client, f, task_queue, tmp_path), asyncio.timeout(60):  # the old code waited forever
        result = await outcome(await start(env.client, req, task_queue))
    assert result.status == "failed"
    assert "invalid plan: regions.us-east-1.freeze_dates: " in result.reason and "within 400 days" in result.reason
    assert f.calls == [] and not [a for a in result.audit if a.action == "lock-granted"]
