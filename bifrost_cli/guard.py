"""`bifrost guard start|status|approve|dismiss|pause|resume|stop`: the region guard of a service (guard/<service>)."""

from __future__ import annotations

import sys
from typing import Any

import click

from bifrost_cli.exits import EXIT_ABORTED, EXIT_OK
from bifrost_cli.links import echo_current_link, echo_link
from bifrost_cli.render import echo
from bifrost_cli.run_state import NoState, read_state
from bifrost_cli.traffic import _csv_ints, _fail, _identity, _run, send, validated
from common.text import markdown as md
from workflows.guard.details import readiness_text
from workflows.guard.models import GuardInput, GuardState, guard_id

GUARD_HELP = """Watch a service's regions; move traffic away from a sick one, bring it back when it is well.

\b
Every look the guard judges each serving region's health metrics against the service's other regions
(false alarms controlled over an unbounded number of looks), and plans, read-only, an evacuation of each
region to know whether the others could absorb it now (its readiness). A region unhealthy for K looks is
evacuated by the usual evacuation workflow (pre-warmed, in steps) when the rules allow it, or proposed
for a person to approve. It never evacuates the last serving region, evacuates at most M at once, keeps a
gap between automatic evacuations, only proposes in quiet windows, and refuses (saying why) when the
receivers cannot take the load. An evacuated region healthy for the hold-down is restored: a small probe
share first, then the rest in steps.

\b
Examples:
  bifrost guard start payments --mode propose                      # propose, a person approves
  bifrost guard start payments --mode auto --max-evacuated 1 --min-gap 60 \\
      --quiet mon-fri@09:00-10:00 --timezone Europe/Dublin --slo error_rate=0.01
  bifrost guard status payments                                    # verdicts, readiness, proposals
  bifrost guard approve payments eu-west-1 --comment "p99 x3, go"
  bifrost guard stop payments --reason "maintenance"               # traffic stays where it is

\b
Exit codes:
  0  done
  1  an update was refused (the message says why)
  2  bad input (names the field), nothing started
  3  a guard of this service is already running
  4  Temporal could not be reached
"""

_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


def quiet_window(text: str) -> dict[str, Any]:
    """`mon-fri@09:00-10:00` (or `sat,sun@00:00-23:59`) as a window; click.BadParameter naming what is wrong."""
    try:
        days_part, hours = text.split("@", 1)
        start, end = hours.split("-", 1)
    except ValueError:
        raise click.BadParameter(f"expected DAYS@HH:MM-HH:MM, e.g. mon-fri@09:00-10:00; got {text!r}") from None
    days: list[str] = []
    for part in days_part.split(","):
        a, _, b = part.partition("-")
        if a not in _DAYS or (b and b not in _DAYS):
            raise click.BadParameter(f"days: use {','.join(_DAYS)} or a range like mon-fri; got {part!r}")
        days += list(_DAYS[_DAYS.index(a):_DAYS.index(b) + 1]) if b else [a]
    return {"days": days, "start": start, "end": end}


def slo_pair(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    try:
        return name, float(value) if sep else float("nan")
    except ValueError:
        raise click.BadParameter(f"expected METRIC=LIMIT, e.g. error_rate=0.01; got {text!r}") from None


def guard_input(data: dict[str, Any]) -> GuardInput:
    """The workflow input from the options; any problem exits 2 before Temporal is contacted."""
    return validated(GuardInput, data, "nothing was started")


def print_guard(state: GuardState) -> None:
    echo(f"{state.workflow_id}: region guard of {state.service} ({state.environment}) — {state.status}; "
         f"look {state.look}" + (f" at {state.last_look_at:%H:%M:%S} UTC" if state.last_look_at else ""))
    if state.waiting_for:
        echo(f"waiting for: {state.waiting_for}")
    if state.reason:
        echo(f"reason: {state.reason}")
    echo(f"  {'region':<16} {'weight':>6}  {'serving':<9} {'sick/well':>9}  readiness")
    for r, w in sorted(state.regions.items()):
        serving = "yes" if w.serving else ("evacuated" if w.evacuated_by_guard else "no")
        echo(f"  {r:<16} {w.weight:>6}  {serving:<9} {w.streak.unhealthy:>4}/{w.streak.healthy:<4}  "
             f"{readiness_text(w.readiness)}")
        echo(f"    {w.verdict}")
        if w.standing:
            echo(f"    standing difference (as usual at this time of day; not evacuated): {w.standing}")
    for p in state.proposals:
        echo(f"proposal: {p.action} {p.region} (look {p.look}): {'; '.join(p.reasons)}")
        echo(f"  approve: bifrost guard approve {state.service} {p.region} --comment ...")
    for d in state.decisions[-10:]:
        echo(f"{d.at:%H:%M:%S} look {d.look}: {d.action} {d.region}: {'; '.join(d.reasons)}")
    for note in state.notes:
        echo(f"note: {note}")


def _already_running(service: str) -> int:
    """Exit 3: a guard of the service runs already; say how to see or stop it."""
    _fail(f"a region guard of {service} is already running ({guard_id(service)}); see `bifrost guard "
          f"status {service}`, or stop it first (`bifrost guard stop {service} --reason ...`)", EXIT_ABORTED)
    return EXIT_ABORTED


async def start_guard(inp: GuardInput, task_queue: str) -> int:
    from temporalio.common import TypedSearchAttributes, WorkflowIDConflictPolicy
    from temporalio.exceptions import WorkflowAlreadyStartedError

    from bifrost_cli.claims import Claim, bifrost_run
    from worker.connect import connect
    from workflows.guard.details import view as guard_view
    from workflows.guard.workflow import RegionGuardWorkflow

    client = await connect()
    claim = Claim(guard_id(inp.service), RegionGuardWorkflow.__name__, task_queue, "bifrost guard start",
                  inp.requested_by, "the region guard can start")
    if await bifrost_run(client, claim) is not None:  # a run no Bifrost worker will run is ended first
        return _already_running(inp.service)
    # the attributes the run would publish before its first look: the same mapping as the workflow's
    attributes, _ = guard_view(GuardState(workflow_id=guard_id(inp.service), service=inp.service,
                                          environment=inp.environment), inp)
    try:
        handle = await client.start_workflow(
            RegionGuardWorkflow.run, inp, id=guard_id(inp.service), task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            search_attributes=TypedSearchAttributes(attributes),
            static_summary=md(f"region guard of {inp.service} ({inp.rules.mode}) by {inp.requested_by}"),
        )
    except WorkflowAlreadyStartedError:
        return _already_running(inp.service)
    click.echo(f"started {handle.id}: mode {inp.rules.mode}, restore {inp.rules.restore}, a look every "
               f"{inp.look_interval_seconds} s; follow it: bifrost guard status {inp.service}")
    echo_link(client, handle.id, handle.result_run_id)
    return EXIT_OK


async def show_guard(service: str, as_json: bool) -> int:
    from worker.connect import connect
    from workflows.guard.workflow import RegionGuardWorkflow

    client = await connect()
    handle = client.get_workflow_handle(guard_id(service))
    state = await read_state(handle, lambda: handle.query(RegionGuardWorkflow.status))
    if isinstance(state, NoState):  # e.g. the last run failed on invalid input: one line, no traceback
        click.echo(state.line, err=True)
        return state.code
    if as_json:
        click.echo(state.model_dump_json(indent=2))
    else:
        print_guard(state)
        await echo_current_link(client, handle)
    return EXIT_OK


@click.group(help=GUARD_HELP)
def guard() -> None:
    pass


def _by(f: Any) -> Any:
    return click.option("--as", "who", default=_identity, show_default="$BIFROST_USER or your login",
                        help="who acts (recorded in the audit trail)")(f)


@guard.command("start")
@click.argument("service")
@click.option("--mode", type=click.Choice(["propose", "auto"]), default="propose", show_default=True,
              help="auto: evacuate by itself when the rules allow; propose: wait for `approve`")
@click.option("--restore", type=click.Choice(["auto", "propose"]), default="auto", show_default=True,
              help="restore a healed region by itself after the hold-down, or propose it")
@click.option("--max-evacuated", type=int, default=1, show_default=True, help="M: regions evacuated at once")
@click.option("--min-gap", "min_gap", type=float, default=60, show_default=True,
              help="minutes between automatic evacuations (inside the gap it only proposes)")
@click.option("--quiet", "quiet", multiple=True, metavar="DAYS@HH:MM-HH:MM",
              help="a weekly window in which it only proposes, e.g. mon-fri@09:00-10:00 (repeatable)")
@click.option("--timezone", default="UTC", show_default=True, help="IANA zone of the quiet windows")
@click.option("--sick-after", type=int, default=2, show_default=True, help="K: unhealthy looks in a row before acting")
@click.option("--well-after", type=int, default=6, show_default=True, help="hold-down: healthy looks before a restore")
@click.option("--slo", "slos", multiple=True, metavar="METRIC=LIMIT", help="absolute SLO: highest mean (repeatable)")
@click.option("--look-every", type=int, default=60, show_default=True, help="seconds between looks")
@click.option("--window", type=int, default=120, show_default=True, help="seconds of samples each look judges")
@click.option("--sample-interval", type=int, default=3, show_default=True, help="seconds between samples")
@click.option("--steps", default=None, help="evacuation levels (default 50,10,0: the restore's probe is 10%)")
@click.option("--approver", "approvers", multiple=True, help="who may approve (repeatable; default: anyone)")
@click.option("--reason", default="")
@click.option("--env", "environment", type=click.Choice(["prod", "test"]), default="prod", show_default=True)
@click.option("--task-queue", default="bifrost", show_default=True)
@_by
def start_cmd(service: str, mode: str, restore: str, max_evacuated: int, min_gap: float, quiet: tuple[str, ...],
              timezone: str, sick_after: int, well_after: int, slos: tuple[str, ...], look_every: int, window: int,
              sample_interval: int, steps: str | None, approvers: tuple[str, ...], reason: str,
              environment: str, task_queue: str, who: str) -> None:
    """Start the region guard of SERVICE (one per service: guard/<service>)."""

    data: dict[str, Any] = {
        "service": service, "environment": environment, "requested_by": who, "reason": reason,
        "rules": {"mode": mode, "restore": restore, "max_evacuated": max_evacuated, "min_gap_minutes": min_gap,
                  "quiet_windows": [quiet_window(q) for q in quiet], "timezone": timezone},
        "judge": {"unhealthy_looks": sick_after, "healthy_looks": well_after, "slo": dict(slo_pair(s) for s in slos)},
        "look_interval_seconds": look_every, "window_seconds": window, "sample_interval_seconds": sample_interval,
        "approvers": list(approvers),
    }
    if steps is not None:
        data["evacuation"] = {"steps": _csv_ints(steps)}
    inp = guard_input(data)
    sys.exit(_run(start_guard(inp, task_queue)))


@guard.command("status")
@click.argument("service")
@click.option("--json", "as_json", is_flag=True, help="print the status query's JSON")
def status_cmd(service: str, as_json: bool) -> None:
    """Each region's verdict, streaks and readiness (could the others absorb it now?), proposals, decisions."""
    sys.exit(_run(show_guard(service, as_json)))


@guard.command("approve")
@click.argument("service")
@click.argument("region")
@click.option("--comment", default="")
@_by
def approve_cmd(service: str, region: str, comment: str, who: str) -> None:
    """Carry out the guard's proposal (evacuate or restore) for REGION."""
    from workflows.guard.models import ApproveGuard

    sys.exit(_run(send(service, "approve", ApproveGuard(region=region, approver=who, comment=comment),
                       workflow_id=guard_id(service))))


@guard.command("dismiss")
@click.argument("service")
@click.argument("region")
@click.option("--reason", required=True)
@_by
def dismiss_cmd(service: str, region: str, reason: str, who: str) -> None:
    """Drop the guard's proposal for REGION (it proposes again if the region stays sick)."""
    from workflows.guard.models import DismissGuard

    sys.exit(_run(send(service, "dismiss", DismissGuard(region=region, by=who, reason=reason),
                       workflow_id=guard_id(service))))


@guard.command("pause")
@click.argument("service")
@click.option("--reason", default="")
@_by
def pause_cmd(service: str, reason: str, who: str) -> None:
    """Hold before the next look (a running evacuation finishes)."""
    from workflows.rollout.updates import Pause

    sys.exit(_run(send(service, "pause", Pause(by=who, reason=reason), workflow_id=guard_id(service))))


@guard.command("resume")
@click.argument("service")
@_by
def resume_cmd(service: str, who: str) -> None:
    """Look again after a pause."""
    from workflows.rollout.updates import Resume

    sys.exit(_run(send(service, "resume", Resume(by=who), workflow_id=guard_id(service))))


@guard.command("stop")
@click.argument("service")
@click.option("--reason", required=True)
@_by
def stop_cmd(service: str, reason: str, who: str) -> None:
    """Stop watching SERVICE; traffic stays where it is (restore by hand with `bifrost restore`)."""
    from workflows.guard.models import StopGuard

    sys.exit(_run(send(service, "stop", StopGuard(by=who, reason=reason), workflow_id=guard_id(service))))
