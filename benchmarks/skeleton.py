"""The SDK's floor for a rollout's shape: benchmark-only workflows with the real rollout's topology and no-op bodies.

`orchestration.py --skeleton` derives a shape from the histories of a real rollout it has just run (which stages
each wave started, the commands each stage issued workflow task by workflow task, the activities the rollout ran
before each wave and after the last), then runs `SkeletonRollout` with that shape on workers built like Bifrost's
(`skeleton_workers`: the same sandboxed runner, interceptors, limits, data converter and report queue, one worker in
the namespace people open and one in its machinery namespace). What the skeleton keeps of the real rollout:

- two namespaces: the rollout in the client's, its stages, their reports and the lock in `<namespace>-machinery`;
  every signal between the two sent by an activity (Bifrost's own `PeerActivities.signal_workflow`) and every query
  naming its namespace, as Bifrost's are;
- a rollout that asks for a service lock by an activity (signal-with-start of `SkeletonLock`, which confirms the
  claim by a query activity of the rollout and signals the grant back), confirms the grant by a query activity,
  and at its end signals the release (the lock confirms it by one more query activity);
- per wave, the rollout's activities before the wave (`region_weights`, the first `notify`), then the wave's
  stages started as Nexus operations (`run_stage` of a small `SkeletonMachinery` service whose handler starts the
  `SkeletonStage` workflow, on an endpoint created as the worker creates Bifrost's);
- each stage issuing the real stage's commands in the real order, one group per workflow task (activities with
  the real names, a `SkeletonReport` child that runs one activity on `<queue>-reports`, a progress signal to the
  rollout, waiting for the rollout's `conclude`, a query activity of the rollout);
- the queries asked as Bifrost asks them (`activities/peers.py`: concurrent askers of one workflow share one
  query; the SDK's worker holds one query task per workflow, and without sharing the others wait a second);
- the rollout confirming every progress signal by a query activity of the stage, one at a time per stage, and
  moving on to the next wave in the task where an answer says the stage succeeded;
- after the last wave: `conclude` to every stage, their ends, the release and the final `notify` activities.

With `confirm=False` (`orchestration.py --skeleton --unconfirmed`) it leaves the queries out too and believes
the signals: the same topology without the confirmations, to show what they add to the floor.

What it leaves out is everything Bifrost's code does inside those tasks and activities: state models, details,
search attributes, markers, adapters, the judge, the stage's check of its origin (a no-op `stage_origin` activity
here), drawing the report. Payloads are a few bytes.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    import nexusrpc
    import nexusrpc.handler
    from temporalio import nexus
    from temporalio.client import Client
    from temporalio.worker import Worker

    from activities.peers import PeerSignal
    from common.namespaces import endpoint_name, home_namespace, machinery_namespace

TIMEOUT = timedelta(seconds=30)


def _signal(workflow_id: str, signal: str, arg: Any, machinery: bool) -> Any:
    """Signal `workflow_id` in the other namespace by an activity, as Bifrost's `signal_across` does."""
    here = workflow.info().namespace
    namespace = machinery_namespace(here) if machinery else home_namespace(here)
    return workflow.execute_activity("signal_workflow", PeerSignal(workflow_id=workflow_id, signal=signal, arg=arg,
                                                                   namespace=namespace), start_to_close_timeout=TIMEOUT)


def _query(workflow_id: str, machinery: bool) -> Any:
    """Query `workflow_id`'s state in the home or the machinery namespace by an activity."""
    here = workflow.info().namespace
    namespace = machinery_namespace(here) if machinery else home_namespace(here)
    return workflow.execute_activity("skeleton_query", [workflow_id, namespace], start_to_close_timeout=TIMEOUT)


@dataclass
class StageArgs:
    """The one input of the `run_stage` operation: the stage's id, its rollout, its steps."""

    id: str
    parent: str
    steps: list[list[str]]
    confirm: bool = True


@nexusrpc.service(name="SkeletonMachinery")
class SkeletonMachinery:
    run_stage: nexusrpc.Operation[StageArgs, int]


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
    async def run(self, args: StageArgs) -> int:
        parent, steps, confirm = args.parent, args.steps, args.confirm
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
                    pending.append(_query(parent, machinery=False))
                elif kind == "report":
                    pending.append(workflow.start_child_workflow(
                        SkeletonReport.run, 0, id=f"{workflow.info().workflow_id}/report",
                        parent_close_policy=workflow.ParentClosePolicy.ABANDON))
                elif kind == "progress":
                    self.reported += 1
                    pending.append(_signal(parent, "skeleton_progress",
                                           [workflow.info().workflow_id, self.reported >= self.total], machinery=False))
            await asyncio.gather(*pending)
        return self.reported

    @workflow.signal(name="skeleton_conclude")
    def conclude(self, _: Any = None) -> None:
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
            await _query(self.holder, machinery=False)
        await _signal(self.holder, "skeleton_lock_granted", None, machinery=False)
        await workflow.wait_condition(lambda: self.released)
        if confirm:
            await _query(self.holder, machinery=False)
        return self.holder

    @workflow.signal(name="skeleton_acquire")
    def acquire(self, holder: str) -> None:
        self.holder = self.holder or holder

    @workflow.signal(name="skeleton_release")
    def release(self, _: Any = None) -> None:
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
            await _query(lock, machinery=True)
        info = workflow.info()
        machinery = workflow.create_nexus_client(service=SkeletonMachinery, endpoint=endpoint_name(info.namespace, info.task_queue))
        stages = []
        for n, wave in enumerate(waves):
            await asyncio.gather(*(workflow.execute_activity(f"skeleton_{name}", 0, start_to_close_timeout=TIMEOUT)
                                   for name in before[n]))
            ids = [f"{me}/{key}" for key in wave]
            stages += await asyncio.gather(*(machinery.start_operation(SkeletonMachinery.run_stage,
                                                                       StageArgs(id=i, parent=me, steps=steps, confirm=confirm))
                                             for i in ids))
            await workflow.wait_condition(lambda ids=ids: all(i in self.succeeded for i in ids))  # type: ignore[misc]
        everyone = [f"{me}/{key}" for wave in waves for key in wave]
        confirming = list(self.confirming.values())
        await asyncio.gather(*(_signal(i, "skeleton_conclude", None, machinery=True) for i in everyone))
        await asyncio.gather(*stages, *confirming)
        for n, group in enumerate(after):
            release = [_signal(lock, "skeleton_release", None, machinery=True)] if n == 0 else []
            await asyncio.gather(*release, *(workflow.execute_activity(f"skeleton_{name}", 0,
                                                                       start_to_close_timeout=TIMEOUT) for name in group))
        return len(everyone)

    async def _confirm(self, stage: str) -> None:
        """One query activity at a time per stage; another signal while it runs gets one more query after it."""
        while self.signals[stage] > 0:
            self.signals[stage] -= 1
            answer = await _query(stage, machinery=True)
            if answer == "succeeded":
                self.succeeded.add(stage)

    @workflow.signal(name="skeleton_progress")
    def progress(self, stage_done: list[Any]) -> None:
        stage, done = str(stage_done[0]), bool(stage_done[1])
        if not self.confirm:  # the signal is believed: no query
            if done:
                self.succeeded.add(stage)
            return
        self.signals[stage] = self.signals.get(stage, 0) + 1
        task = self.confirming.get(stage)
        if task is None or task.done():
            self.confirming[stage] = asyncio.ensure_future(self._confirm(stage))

    @workflow.signal(name="skeleton_lock_granted")
    def lock_granted(self, _: Any = None) -> None:
        self.granted = True

    @workflow.query(name="skeleton_state")
    def state(self) -> str:
        return "running"


@nexusrpc.handler.service_handler(service=SkeletonMachinery)
class SkeletonMachineryHandler:
    """Starts a `SkeletonStage` in the machinery namespace, as worker/machinery.py starts a stage."""

    @nexus.workflow_run_operation
    async def run_stage(self, ctx: nexus.WorkflowRunOperationContext, args: StageArgs) -> nexus.WorkflowHandle[int]:
        return await ctx.start_workflow(SkeletonStage.run, args, id=args.id)


def skeleton_activities(client: Client, machinery: Client,
                        names: Sequence[str]) -> tuple[list[Callable[..., Any]], Callable[..., Any]]:
    """No-op activities named after the real ones (`skeleton_<name>`), the lock request, the query, Bifrost's own
    signal across namespaces, and the report's."""
    def noop(name: str) -> Callable[..., Any]:
        @activity.defn(name=f"skeleton_{name}")
        async def run(n: int) -> int:
            return n
        return run

    from activities.peers import PeerActivities, PeerQuery

    peers = PeerActivities(client, machinery)  # Bifrost's own query path: concurrent askers of one workflow share one query

    @activity.defn(name="skeleton_query")
    async def query(workflow_id_namespace: list[str]) -> str:
        workflow_id, namespace = workflow_id_namespace
        q = PeerQuery(workflow_id=workflow_id, query="skeleton_state", namespace=namespace)
        return str((await peers.query_workflow(q)).answer)

    @activity.defn(name="skeleton_request_lock")
    async def request_lock(lock_holder_confirm: list[str]) -> None:
        lock, holder, confirm = lock_holder_confirm
        await machinery.start_workflow(SkeletonLock.run, bool(confirm), id=lock, task_queue=activity.info().task_queue,
                                       start_signal="skeleton_acquire", start_signal_args=[holder])

    return [*(noop(n) for n in sorted(set(names))), query, request_lock, peers.signal_workflow], noop("render_report")


async def skeleton_workers(client: Client, task_queue: str, names: Sequence[str], sandboxed: bool = True) -> list[Worker]:
    """The skeleton's workers, configured as `worker.build.build_worker` configures Bifrost's: one in the client's
    namespace (the rollout), one in its machinery namespace (stages, reports, lock, and the Nexus handler, reached by
    an endpoint created as Bifrost's worker creates its own) and the report worker there; the same sandboxed runner
    (with its compile-once loader extended to this module), interceptors and limits. `sandboxed=False` swaps in the
    SDK's unsandboxed runner, only to show what the sandbox costs per task."""
    from temporalio.worker import UnsandboxedWorkflowRunner

    from worker.endpoints import ensure_endpoint, machinery_client
    from worker.limits import WorkerLimits
    from worker.sandbox import CompileOnce, workflow_runner
    from worker.telemetry import worker_interceptors

    if not any(isinstance(f, CompileOnce) and f.packages == (__name__,) for f in sys.meta_path):
        sys.meta_path.insert(0, CompileOnce((__name__,)))
    await ensure_endpoint(client, task_queue)
    machinery = machinery_client(client)
    limits = WorkerLimits()
    activities, render = skeleton_activities(client, machinery, names)

    def worker(on: Client, workflows: list[type], **more: Any) -> Worker:
        return Worker(on, task_queue=task_queue, workflows=workflows, activities=activities,
                      workflow_runner=workflow_runner() if sandboxed else UnsandboxedWorkflowRunner(),
                      interceptors=worker_interceptors(), max_concurrent_workflow_tasks=limits.workflow_tasks,
                      max_concurrent_activities=limits.activities, max_concurrent_local_activities=limits.local_activities,
                      max_cached_workflows=limits.cached_workflows, **more)

    drawing = Worker(machinery, task_queue=task_queue + "-reports", activities=[render], max_concurrent_activities=2,
                     interceptors=worker_interceptors())
    return [worker(client, [SkeletonRollout]),
            worker(machinery, [SkeletonStage, SkeletonLock, SkeletonReport], nexus_service_handlers=[SkeletonMachineryHandler()]),
            drawing]
