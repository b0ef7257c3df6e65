"""The SDK's floor for a rollout's shape: benchmark-only workflows with the real rollout's topology and no-op bodies.

`orchestration.py --skeleton` derives a `Shape` from the histories of a real rollout it has just run (which
stages each wave started, the commands each stage issued workflow task by workflow task, the activities the
rollout ran before each wave and after the last), then runs `SkeletonRollout` with that shape on a worker built
like Bifrost's (`skeleton_worker`: the same sandboxed runner, interceptors, limits, data converter and report
queue). What the skeleton keeps of the real rollout:

- a rollout that asks for a service lock by an activity (signal-with-start of `SkeletonLock`, which confirms the
  claim by a query activity of the rollout and signals the grant back), confirms the grant by a query activity,
  and at its end signals the release (the lock confirms it by one more query activity);
- per wave, the rollout's activities before the wave (`region_weights`, the first `notify`), then the wave's
  stages started as child workflows;
- each stage issuing the real stage's commands in the real order, one group per workflow task (activities with
  the real names, a `SkeletonReport` child that runs one activity on `<queue>-reports`, a progress signal to the
  rollout, waiting for the rollout's `conclude`, a query activity of the rollout);
- the queries asked as Bifrost asks them (`activities/peers.py`: concurrent askers of one workflow share one
  query; the SDK's worker holds one query task per workflow, and without sharing the others wait a second);
- the rollout confirming every progress signal by a query activity of the stage, one at a time per stage, and
  moving on to the next wave in the task where an answer says the stage succeeded;
- after the last wave: `conclude` to every stage, their ends, the release and the final `notify` activities.

With `confirm=False` (`orchestration.py --skeleton --unconfirmed`) it leaves the queries out too and believes
the signals, as Bifrost did before issue #17 made every internal signal a poke confirmed by a query: the same
topology without the confirmations, to show what they add to the floor.

What it leaves out is everything Bifrost's code does inside those tasks and activities: state models, details,
search attributes, patches and markers, adapters, the judge, drawing the report. Payloads are a few bytes.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from temporalio.client import Client
    from temporalio.worker import Worker

TIMEOUT = timedelta(seconds=30)


@workflow.defn(name="SkeletonReport")
class SkeletonReport:
    @workflow.run
    async def run(self, n: int) -> int:
        return int(await workflow.execute_activity("skeleton_render_report", n, start_to_close_timeout=TIMEOUT,
                                                   task_queue=workflow.info().task_queue + "-reports"))


@workflow.defn(name="SkeletonStage")
class SkeletonStage:
    """Runs `steps`: each a group of commands issued in one workflow task and awaited together.
    `act:NAME` an activity, `report` a report child (waits until it started), `progress` a signal to the parent,
    `wait` the parent's `conclude` signal, `query` a query activity of the parent."""

    def __init__(self) -> None:
        self.reported = 0
        self.concluded = False
        self.total = 0

    @workflow.run
    async def run(self, parent: str, steps: list[list[str]], confirm: bool = True) -> int:
        self.total = sum(item == "progress" for step in steps for item in step)
        for step in steps:
            pending: list[Any] = []
            for item in step:
                kind, _, name = item.partition(":")
                if kind == "wait":
                    await workflow.wait_condition(lambda: self.concluded)
                elif kind == "act":
                    pending.append(workflow.execute_activity(f"skeleton_{name}", 0, start_to_close_timeout=TIMEOUT))
                elif kind == "query" and confirm:
                    pending.append(workflow.execute_activity("skeleton_query", parent, start_to_close_timeout=TIMEOUT))
                elif kind == "report":
                    pending.append(workflow.start_child_workflow(
                        SkeletonReport.run, 0, id=f"{workflow.info().workflow_id}/report",
                        parent_close_policy=workflow.ParentClosePolicy.ABANDON))
                elif kind == "progress":
                    self.reported += 1
                    pending.append(workflow.get_external_workflow_handle(parent).signal(
                        "skeleton_progress", args=[workflow.info().workflow_id, self.reported >= self.total]))
            await asyncio.gather(*pending)
        return self.reported

    @workflow.signal(name="skeleton_conclude")
    def conclude(self) -> None:
        self.concluded = True

    @workflow.query(name="skeleton_state")
    def state(self) -> str:
        return "succeeded" if self.total and self.reported >= self.total else f"running {self.reported}"


@workflow.defn(name="SkeletonLock")
class SkeletonLock:
    """Grants the first claim after confirming it by a query activity; confirms the release the same way."""

    def __init__(self) -> None:
        self.holder = ""
        self.released = False

    @workflow.run
    async def run(self, confirm: bool) -> str:
        await workflow.wait_condition(lambda: bool(self.holder))
        if confirm:
            await workflow.execute_activity("skeleton_query", self.holder, start_to_close_timeout=TIMEOUT)
        await workflow.get_external_workflow_handle(self.holder).signal("skeleton_lock_granted")
        await workflow.wait_condition(lambda: self.released)
        if confirm:
            await workflow.execute_activity("skeleton_query", self.holder, start_to_close_timeout=TIMEOUT)
        return self.holder

    @workflow.signal(name="skeleton_acquire")
    def acquire(self, holder: str) -> None:
        self.holder = self.holder or holder

    @workflow.signal(name="skeleton_release")
    def release(self) -> None:
        self.released = True

    @workflow.query(name="skeleton_state")
    def state(self) -> str:
        return self.holder


@workflow.defn(name="SkeletonRollout")
class SkeletonRollout:
    """`shape` as `Shape.to_args()` builds it: waves of stage keys, the stage's steps, the activities before each
    wave and the groups of activities after the last."""

    def __init__(self) -> None:
        self.granted = False
        self.signals: dict[str, int] = {}
        self.succeeded: set[str] = set()
        self.confirming: dict[str, asyncio.Task[None]] = {}
        self.confirm = True

    @workflow.run
    async def run(self, lock: str, waves: list[list[str]], steps: list[list[str]], before: list[list[str]],
                  after: list[list[str]], confirm: bool = True) -> int:
        me = workflow.info().workflow_id
        self.confirm = confirm
        await workflow.execute_activity("skeleton_request_lock", [lock, me, "confirm" if confirm else ""],
                                        start_to_close_timeout=TIMEOUT)
        await workflow.wait_condition(lambda: self.granted)
        if confirm:
            await workflow.execute_activity("skeleton_query", lock, start_to_close_timeout=TIMEOUT)
        children = []
        for n, wave in enumerate(waves):
            await asyncio.gather(*(workflow.execute_activity(f"skeleton_{name}", 0, start_to_close_timeout=TIMEOUT)
                                   for name in before[n]))
            ids = [f"{me}/{key}" for key in wave]
            children += await asyncio.gather(*(workflow.start_child_workflow(SkeletonStage.run, args=[me, steps, confirm],
                                                                             id=i)
                                               for i in ids))
            await workflow.wait_condition(lambda ids=ids: all(i in self.succeeded for i in ids))  # type: ignore[misc]
        everyone = [f"{me}/{key}" for wave in waves for key in wave]
        confirming = list(self.confirming.values())
        await asyncio.gather(*(workflow.get_external_workflow_handle(i).signal("skeleton_conclude") for i in everyone))
        await asyncio.gather(*children, *confirming)
        for n, group in enumerate(after):
            release = [workflow.get_external_workflow_handle(lock).signal("skeleton_release")] if n == 0 else []
            await asyncio.gather(*release, *(workflow.execute_activity(f"skeleton_{name}", 0,
                                                                       start_to_close_timeout=TIMEOUT) for name in group))
        return len(everyone)

    async def _confirm(self, stage: str) -> None:
        """One query activity at a time per stage; another signal while it runs gets one more query after it."""
        while self.signals[stage] > 0:
            self.signals[stage] -= 1
            answer = await workflow.execute_activity("skeleton_query", stage, start_to_close_timeout=TIMEOUT)
            if answer == "succeeded":
                self.succeeded.add(stage)

    @workflow.signal(name="skeleton_progress")
    def progress(self, stage: str, done: bool) -> None:
        if not self.confirm:  # the signal is believed: no query (what Bifrost did before issue #17)
            if done:
                self.succeeded.add(stage)
            return
        self.signals[stage] = self.signals.get(stage, 0) + 1
        task = self.confirming.get(stage)
        if task is None or task.done():
            self.confirming[stage] = asyncio.ensure_future(self._confirm(stage))

    @workflow.signal(name="skeleton_lock_granted")
    def lock_granted(self) -> None:
        self.granted = True

    @workflow.query(name="skeleton_state")
    def state(self) -> str:
        return "running"


def skeleton_activities(client: Client, names: Sequence[str]) -> tuple[list[Callable[..., Any]], Callable[..., Any]]:
    """No-op activities named after the real ones (`skeleton_<name>`), the lock request, the query, and the report's."""
    def noop(name: str) -> Callable[..., Any]:
        @activity.defn(name=f"skeleton_{name}")
        async def run(n: int) -> int:
            return n
        return run

    from activities.peers import PeerActivities, PeerQuery

    peers = PeerActivities(client)  # Bifrost's own query path: concurrent askers of one workflow share one query

    @activity.defn(name="skeleton_query")
    async def query(workflow_id: str) -> str:
        return str((await peers.query_workflow(PeerQuery(workflow_id=workflow_id, query="skeleton_state"))).answer)

    @activity.defn(name="skeleton_request_lock")
    async def request_lock(lock_holder_confirm: list[str]) -> None:
        lock, holder, confirm = lock_holder_confirm
        await client.start_workflow(SkeletonLock.run, bool(confirm), id=lock, task_queue=activity.info().task_queue,
                                    start_signal="skeleton_acquire", start_signal_args=[holder])

    return [*(noop(n) for n in sorted(set(names))), query, request_lock], noop("render_report")


def skeleton_worker(client: Client, task_queue: str, names: Sequence[str],
                    sandboxed: bool = True) -> tuple[Worker, Worker]:
    """The skeleton's worker and its report worker, configured as `worker.build.build_worker` configures Bifrost's:
    the same sandboxed runner (with its compile-once loader extended to this module), interceptors and limits.
    `sandboxed=False` swaps in the SDK's unsandboxed runner, only to show what the sandbox costs per task."""
    from temporalio.worker import UnsandboxedWorkflowRunner

    from worker.limits import WorkerLimits
    from worker.sandbox import CompileOnce, workflow_runner
    from worker.telemetry import worker_interceptors

    runner = workflow_runner()
    if not any(isinstance(f, CompileOnce) and f.packages == (__name__,) for f in sys.meta_path):
        sys.meta_path.insert(0, CompileOnce((__name__,)))
    limits = WorkerLimits()
    activities, render = skeleton_activities(client, names)
    main = Worker(client, task_queue=task_queue, workflows=[SkeletonRollout, SkeletonStage, SkeletonLock, SkeletonReport],
                  activities=activities, workflow_runner=runner if sandboxed else UnsandboxedWorkflowRunner(), interceptors=worker_interceptors(),
                  max_concurrent_workflow_tasks=limits.workflow_tasks, max_concurrent_activities=limits.activities,
                  max_concurrent_local_activities=limits.local_activities, max_cached_workflows=limits.cached_workflows)
    drawing = Worker(client, task_queue=task_queue + "-reports", activities=[render], max_concurrent_activities=2,
                     interceptors=worker_interceptors())
    return main, drawing
