"""`bifrost drill schedule|run|unschedule`: practice evacuations on a Temporal Schedule (DrillWorkflow)."""

from __future__ import annotations

import re
import sys
from datetime import timedelta
from typing import Any

import click

from bifrost_cli.exits import EXIT_ABORTED, EXIT_OK, EXIT_ROLLED_BACK
from bifrost_cli.guard import quiet_window
from bifrost_cli.links import echo_link
from bifrost_cli.traffic import _csv_ints, _fail, _identity, _run, validated
from workflows.drill.models import DrillInput, drill_id

DRILL_HELP = """Practise evacuations: each region in turn evacuated and restored, on a schedule.

\b
A drill runs the usual evacuation (pre-warmed, in steps, health-checked) of one region at a time, keeps it
evacuated for --hold minutes and restores it, and records per region the time to drain, the receivers'
health after each step and anything refused. It is skipped (and says why) inside a blocked window or while
a rollout of the service holds its lock. Notifications go to the worker's webhooks.

\b
Examples:
  bifrost drill schedule payments --regions us-east-1,eu-west-1,ap-south-1 --cron "0 10 * * TUE" \\
      --blocked mon-fri@16:00-23:59 --timezone Europe/Dublin --hold 10
  bifrost drill schedule payments --regions us-east-1,eu-west-1 --every 168      # hours
  bifrost drill run payments --regions eu-west-1 --hold 0 --wait                 # one drill now
  bifrost drill unschedule payments
"""


def drill_input(service: str, regions: str, blocked: tuple[str, ...], timezone: str, hold: float, steps: str | None,
                who: str) -> DrillInput:
    data: dict[str, Any] = {"service": service, "requested_by": who, "regions": [r for r in regions.split(",") if r],
                            "blocked_windows": [quiet_window(b) for b in blocked], "timezone": timezone,
                            "hold_minutes": hold}
    if steps is not None:
        data["evacuation"] = {"steps": _csv_ints(steps)}
    return validated(DrillInput, data, "nothing was scheduled")


async def schedule_drill(inp: DrillInput, *, cron: str | None, every_hours: float | None, task_queue: str) -> int:
    from temporalio.client import (
        Schedule,
        ScheduleActionStartWorkflow,
        ScheduleAlreadyRunningError,
        ScheduleIntervalSpec,
        ScheduleOverlapPolicy,
        SchedulePolicy,
        ScheduleSpec,
    )

    from worker.connect import connect
    from workflows.drill.workflow import DrillWorkflow

    spec = ScheduleSpec(cron_expressions=[cron]) if cron else ScheduleSpec(
        intervals=[ScheduleIntervalSpec(every=timedelta(hours=every_hours or 168))])
    client = await connect()
    try:
        await client.create_schedule(drill_id(inp.service), Schedule(
            action=ScheduleActionStartWorkflow(DrillWorkflow.run, inp, id=drill_id(inp.service), task_queue=task_queue),
            spec=spec, policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP)))
    except ScheduleAlreadyRunningError:
        _fail(f"a drill schedule of {inp.service} exists ({drill_id(inp.service)}); remove it first with "
              f"`bifrost drill unschedule {inp.service}`", EXIT_ABORTED)
    when = f"cron {cron!r}" if cron else f"every {every_hours or 168:g} h"
    click.echo(f"scheduled {drill_id(inp.service)}: {when}, regions {', '.join(inp.regions)}, hold {inp.hold_minutes:g} min; "
               "a drill that would overlap a running one is skipped")
    return EXIT_OK


async def run_drill(inp: DrillInput, *, wait: bool, task_queue: str) -> int:
    import uuid

    from bifrost_cli.claims import Claim, bifrost_run
    from worker.connect import connect
    from workflows.drill.models import DrillReport
    from workflows.drill.workflow import DrillWorkflow
    from workflows.evacuation.settings import evacuation_id

    client = await connect()
    # the drill moves traffic under traffic/<service>: a run there no Bifrost worker will run would refuse every step
    await bifrost_run(client, Claim(evacuation_id(inp.service), "EvacuationWorkflow", task_queue, "bifrost drill run",
                                    inp.requested_by, "the drill can move traffic"))
    handle = await client.start_workflow(DrillWorkflow.run, inp, id=f"{drill_id(inp.service)}/{uuid.uuid4().hex[:8]}",
                                         task_queue=task_queue)
    click.echo(f"started {handle.id}")
    echo_link(client, handle.id, handle.result_run_id)
    if not wait:
        return EXIT_OK
    report = DrillReport.model_validate(await handle.result())
    click.echo(f"{report.outcome}: {report.reason}")
    for r in report.regions:
        drain = f"{r.drain_seconds:.0f} s" if r.drain_seconds is not None else "-"
        click.echo(f"  {r.region}: evacuation {r.evacuation or '-'}; drained in {drain}; restore {r.restore or '-'}")
        for line in [*r.receivers_health, *(f"refused: {x}" for x in r.refused)]:
            click.echo(f"    {line}")
    return EXIT_OK if report.outcome in ("drilled", "skipped") else EXIT_ROLLED_BACK


async def unschedule_drill(service: str) -> int:
    from worker.connect import connect

    client = await connect()
    await client.get_schedule_handle(drill_id(service)).delete()
    click.echo(f"removed the drill schedule {drill_id(service)}")
    return EXIT_OK


@click.group(help=DRILL_HELP)
def drill() -> None:
    pass


def _drill_options(f: Any) -> Any:
    for option in reversed([
        click.argument("service"),
        click.option("--regions", required=True, help="comma-separated, drilled one at a time in this order"),
        click.option("--blocked", multiple=True, metavar="DAYS@HH:MM-HH:MM", help="skip drills in this window (repeatable)"),
        click.option("--timezone", default="UTC", show_default=True, help="IANA zone of the blocked windows"),
        click.option("--hold", type=float, default=5, show_default=True, help="minutes each region stays evacuated"),
        click.option("--steps", default=None, help="evacuation levels (default 50,10,0)"),
        click.option("--task-queue", default="bifrost", show_default=True),
        click.option("--as", "who", default=_identity, show_default="$BIFROST_USER or your login"),
    ]):
        f = option(f)
    return f


@drill.command("schedule")
@_drill_options
@click.option("--cron", default=None, help='when, as a cron expression (UTC), e.g. "0 10 * * TUE"')
@click.option("--every", "every_hours", type=click.FloatRange(min=1), default=None, help="or every this many hours")
def schedule_cmd(service: str, regions: str, blocked: tuple[str, ...], timezone: str, hold: float, steps: str | None,
                 task_queue: str, who: str, cron: str | None, every_hours: float | None) -> None:
    """Create a Temporal Schedule (id drill/<service>) that drills SERVICE's regions (weekly by default)."""
    if cron and every_hours:
        raise click.UsageError("give --cron or --every, not both")
    if cron and not re.fullmatch(r"[0-9*/,\- A-Za-z?#LW]+", cron):
        raise click.BadParameter(f"not a cron expression: {cron!r}", param_hint="--cron")
    inp = drill_input(service, regions, blocked, timezone, hold, steps, who)
    sys.exit(_run(schedule_drill(inp, cron=cron, every_hours=every_hours, task_queue=task_queue)))


@drill.command("run")
@_drill_options
@click.option("--wait", is_flag=True, help="wait for the report; exit 1 if a region was not drilled cleanly")
def run_cmd(service: str, regions: str, blocked: tuple[str, ...], timezone: str, hold: float, steps: str | None,
            task_queue: str, who: str, wait: bool) -> None:
    """Drill SERVICE's regions once, now."""
    inp = drill_input(service, regions, blocked, timezone, hold, steps, who)
    sys.exit(_run(run_drill(inp, wait=wait, task_queue=task_queue)))


@drill.command("unschedule")
@click.argument("service")
def unschedule_cmd(service: str) -> None:
    """Remove SERVICE's drill schedule (a drill already running goes on)."""
    sys.exit(_run(unschedule_drill(service)))
