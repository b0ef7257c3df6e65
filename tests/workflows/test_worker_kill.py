"""A `bifrost worker` process is SIGKILLed mid-rollout; a second one on the same fleet file finishes it.

The kill lands in the canary timer of the second stage, right after the first stage's promote: no activity
is in flight, so Temporal needs no activity timeout to move on (only the sticky queue's few seconds).
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from activities.adapters.simulated import SimulatedFleet
from tests.worker_processes import WorkerProcesses
from tests.workflows.helpers import make_request, start
from worker.endpoints import machinery_client
from workflows.plan import build_plan


def _descendants(pid: int) -> set[int]:
    """Every live process below `pid` (children, grandchildren, ...), from /proc."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended while we looked
        if fields[0] != "Z":
            parents[int(stat.parent.name)] = int(fields[1])
    found, todo = set(), [pid]
    while todo:
        above = todo.pop()
        kids = [child for child, parent in parents.items() if parent == above]
        found.update(kids)
        todo.extend(kids)
    return found


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def _in_timer(client: Client, workflow_id: str) -> bool:
    """The stage workflow waits on a timer that has not fired, with no activity scheduled and unfinished."""
    try:
        history = await client.get_workflow_handle(workflow_id).fetch_history()
    except Exception:  # noqa: BLE001 - not started yet
        return False
    timers: set[str] = set()
    activities: set[int] = set()
    for e in history.events:
        if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED:
            timers.add(e.timer_started_event_attributes.timer_id)
        elif e.event_type == EventType.EVENT_TYPE_TIMER_FIRED:
            timers.discard(e.timer_fired_event_attributes.timer_id)
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            activities.add(e.event_id)
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            activities.discard(e.activity_task_completed_event_attributes.scheduled_event_id)
    return bool(timers) and not activities


async def test_a_killed_worker_is_replaced_and_no_stage_is_promoted_twice(env, tmp_path: Path, task_queue: str):
    scenario, db, reports = tmp_path / "fleet.yaml", tmp_path / "fleet.db", tmp_path / "reports"
    scenario.write_text("initial_version: 1.0.0\nmin_samples: 60\nfresh_draws: false\n")
    req = make_request(
        regions=[{"name": "ap-south-1", "traffic_share": 0.4}, {"name": "us-east-1", "traffic_share": 0.6}],
        canary={"analysis_minutes": 0.1},  # a 6 s canary window per stage: the kill lands in one
    )
    stages = [s.key for s in build_plan(req).stages()]
    assert len(stages) == 4
    workers = WorkerProcesses(env.client, task_queue, tmp_path, "--fleet", str(scenario), "--fleet-db", str(db),
                              "--reports", str(reports))
    fleet = SimulatedFleet(state_file=db)  # this test's own view of the workers' fleet
    try:
        first = workers.start("worker-1")
        handle = await start(env.client, req, task_queue)

        def promoted() -> list[str]:
            return [e.stage_key for e in fleet.effects if e.field == "primary" and e.after == req.version]

        await workers.until("the first promote", lambda: promoted(), 90)
        assert promoted() == [stages[0]]
        await workers.until(f"{stages[1]}'s canary window", lambda: _in_timer(machinery_client(env.client), f"{handle.id}/{stages[1]}"), 60)
        # the first stage's report is being drawn, or was: the worker has its forkserver and render process
        await workers.until("the first worker's render processes", lambda: len(_descendants(first.pid)) >= 2, 60)
        helpers = _descendants(first.pid)
        assert workers.kill(first) == -signal.SIGKILL
        # they follow it: no orphaned render process or forkserver holds memory after a kill
        await workers.until("the killed worker's render processes to exit", lambda: not any(map(_running, helpers)), 30)
        promoted_before_kill = promoted()
        assert promoted_before_kill == [stages[0]]  # killed mid-rollout

        second = workers.start("worker-2")
        result = await asyncio.wait_for(handle.result(), timeout=180)
        assert second.poll() is None  # the second worker ran to the end and still runs

        assert result.status == "succeeded", result.reason
        assert [s.key for s in result.stages] == stages
        assert all(s.version_now == req.version for s in result.stages)
        # no repeated promote: each stage's primary switched exactly once, from the old version to the new
        switches = [(e.stage_key, e.before, e.after) for e in fleet.effects if e.field == "primary"]
        assert switches == [(key, "1.0.0", req.version) for key in stages]
        by_pid = {e.stage_key: e.pid for e in fleet.effects if e.field == "primary"}
        assert by_pid[stages[0]] == first.pid and {by_pid[k] for k in stages[1:]} == {second.pid}
        assert all(v == {"primary": req.version, "canary": None, "baseline": None} for v in fleet.snapshot().values())
        assert sorted(k.split("/", 1)[1] for k in fleet.snapshot()) == sorted(stages)
    finally:
        workers.stop()
        fleet.close()
