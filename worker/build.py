"""Assemble a worker: the workflows, and the activities bound to an adapter registry, a report store and a render pool."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import select
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from datetime import timedelta
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from temporalio.client import Client
from temporalio.worker import Worker, WorkerDeploymentConfig

from activities.adapters.registry import AdapterRegistry
from activities.adapters.reports import LocalReportStore, ReportStore
from activities.analysis import AnalysisActivities
from activities.deploy import DeployActivities
from activities.guard import GuardActivities
from activities.lock import LockActivities
from activities.notify import NotifyActivities
from activities.peers import PeerActivities
from activities.policy import PolicyActivities
from activities.releases import ReleaseActivities
from activities.routing import RoutingActivities
from activities.traffic.shift import TrafficActivities
from worker.endpoints import ensure_endpoint, machinery_client
from worker.limits import WorkerLimits
from worker.machinery import MachineryHandler
from worker.sandbox import workflow_runner
from worker.telemetry import worker_interceptors
from workflows.drill.workflow import DrillWorkflow
from workflows.evacuation.workflow import EvacuationWorkflow
from workflows.guard.workflow import RegionGuardWorkflow
from workflows.lock.workflow import ServiceLockWorkflow
from workflows.report.workflow import ReportWorkflow, report_task_queue
from workflows.revert.workflow import RevertWorkflow
from workflows.rollout.workflow import RolloutWorkflow
from workflows.stage.workflow import StageWorkflow

# What runs in the namespace people open (things a person or CI started, and the traffic changes and reports of
# reverts, guards and drills), and what runs in its machinery namespace (common/namespaces.py).
HOME_WORKFLOWS = [RolloutWorkflow, EvacuationWorkflow, ReportWorkflow, RevertWorkflow, RegionGuardWorkflow, DrillWorkflow]
MACHINERY_WORKFLOWS = [StageWorkflow, EvacuationWorkflow, ReportWorkflow, ServiceLockWorkflow]
WORKFLOWS = list(dict.fromkeys([*HOME_WORKFLOWS, *MACHINERY_WORKFLOWS]))  # every type, once (replay, tests)
P = ParamSpec("P")
T = TypeVar("T")


def _background(owner: int) -> None:
    """Run a render process at a lower CPU priority (on a busy host the worker's event loop goes first), and
    end it when the worker that owns it dies: a SIGKILLed worker leaves no render process (nor forkserver)."""
    os.nice(10)
    threading.Thread(target=_exit_with, args=(owner,), name="exit-with-worker", daemon=True).start()


def _exit_with(owner: int) -> None:
    """Block until process `owner` has ended, then end this process at once (it holds no state worth saving)."""
    try:
        pidfd = os.pidfd_open(owner)  # readable once the process has ended; immune to pid reuse
    except ProcessLookupError:
        os._exit(0)
    except (AttributeError, OSError):  # no pidfd (not Linux, or an old kernel): poll the pid instead
        while _alive(owner):
            time.sleep(2)
        os._exit(0)
    select.select([pidfd], [], [])
    os._exit(0)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RenderPool(Executor):
    """The worker-wide process pool reports are drawn in, so matplotlib never holds the worker's GIL.

    Processes start from a forkserver (forking a process that runs Temporal's threads is unsafe) with
    canary.report preloaded, only when the first report is drawn; a pool broken by a dying process
    (e.g. killed for memory) is replaced on the next submit, and the failed render is retried by Temporal."""

    def __init__(self, processes: int = 1) -> None:
        if processes < 1:
            raise ValueError(f"render processes must be at least 1, got {processes}")
        self.processes = processes
        self._lock = threading.Lock()
        self._pool = self._new()

    def _new(self) -> ProcessPoolExecutor:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["__main__", "canary.report"])  # children then skip re-running __main__
        return ProcessPoolExecutor(max_workers=self.processes, mp_context=ctx, initializer=_background,
                                   initargs=(os.getpid(),))

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        with self._lock:
            try:
                return self._pool.submit(fn, *args, **kwargs)
            except BrokenProcessPool:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = self._new()
                return self._pool.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)


class BifrostWorker(Worker):
    """A Temporal worker for the namespace people open that also runs the workers beside it: the machinery
    namespace's worker (stages, their reports and evacuations, through a Nexus endpoint it creates when it starts)
    and, in each namespace, the worker polling the reports' task queue (`drawing`); it owns its render pool. All
    start and stop together, and a fatal error in one stops the others."""

    def __init__(self, *args: Any, drawing: Worker, machinery: list[Worker] | None = None,
                 render_pool: Executor | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.render_pool = render_pool
        self.drawing = drawing
        self.machinery = list(machinery or [])
        self._client: Client = kwargs.get("client") or args[0]
        self._task_queue: str = kwargs["task_queue"]
        self.endpoint: str | None = None

    async def prepare(self) -> str:
        """Create (or find) the Nexus endpoint the rollouts of this task queue reach their stages by."""
        if self.endpoint is None:
            self.endpoint = await ensure_endpoint(self._client, self._task_queue)
        return self.endpoint

    async def __aenter__(self) -> BifrostWorker:
        await self.prepare()  # before any rollout this worker runs schedules a stage
        await super().__aenter__()
        return self

    @property
    def _beside(self) -> list[Worker]:
        return [self.drawing, *self.machinery]

    async def run(self) -> None:
        try:
            await self.prepare()
            tasks = [asyncio.create_task(super().run()), *(asyncio.create_task(w.run()) for w in self._beside)]
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            await self.shutdown()  # a shutdown asked for, or a fatal error: the others stop too
            await asyncio.wait(tasks)
            for task in tasks:
                if task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
        finally:
            if self.render_pool is not None:  # every activity has ended by now: nothing is waiting on the pool
                await asyncio.to_thread(self.render_pool.shutdown, wait=True, cancel_futures=True)

    async def shutdown(self) -> None:
        """Stop every worker at once, so their graceful periods for in-flight activities overlap."""
        await asyncio.gather(super().shutdown(), *(w.shutdown() for w in self._beside), return_exceptions=True)


def activities_for(
    client: Client, task_queue: str, registry: AdapterRegistry, reports_dir: str | Path,
    lock_holder_check: timedelta | None = None, *, reports: ReportStore | None = None,
    render_pool: Executor | None = None, machinery: Client | None = None,
) -> list[Callable[..., Any]]:
    """Every activity the workflows call (in either namespace), bound to `registry`; reports go to `reports`, else
    the registry's store (targets file), else the folder `reports_dir`. `machinery`: the machinery namespace's
    client (else one is made on `client`'s connection)."""
    deploy = DeployActivities(registry)
    store = reports or registry.reports or LocalReportStore(reports_dir)
    analysis = AnalysisActivities(registry, store, render_pool)
    machinery = machinery or machinery_client(client)
    lock = LockActivities(client, task_queue, lock_holder_check, locks=machinery)
    notify = NotifyActivities(registry)
    peers = PeerActivities(client, machinery)
    traffic = TrafficActivities(registry, store, claims=peers.claim_elsewhere)
    releases = ReleaseActivities(client)
    guard = GuardActivities(registry, traffic)
    policy = PolicyActivities(registry)
    routing = RoutingActivities(registry)
    return [
        deploy.current_version, deploy.deploy_canary, deploy.deploy_baseline, deploy.promote, deploy.rollback,
        deploy.cleanup, analysis.analyze_canary, analysis.soak_check, analysis.render_report,
        lock.request_service_lock, lock.rollout_is_running, lock.recover_claims, peers.query_workflow, peers.cancel_request, peers.cancel_run,
        peers.signal_workflow, peers.stage_origin, peers.run_is_open,
        notify.notify, traffic.plan_traffic, traffic.set_weights, traffic.scale, traffic.check_health, traffic.read_traffic,
        releases.find_release, guard.guard_look, traffic.region_weights, policy.promote_hold_floor,
        routing.canary_weights, routing.set_canary_weights, routing.canary_router_problems,
    ]


def build_worker(
    client: Client,
    registry: AdapterRegistry,
    *,
    task_queue: str,
    reports_dir: str | Path = ".bifrost/reports",
    reports: ReportStore | None = None,
    render_pool: Executor | None = None,
    render_processes: int = 1,
    graceful_shutdown: timedelta = timedelta(seconds=30),
    lock_holder_check: timedelta | None = None,
    limits: WorkerLimits | None = None,
    deployment: WorkerDeploymentConfig | None = None,
) -> BifrostWorker:
    """A worker for `task_queue` running the rollout workflows against `registry`.

    Reports are stored in `reports` (else the targets file's store, else the folder `reports_dir`) and drawn
    in `render_pool`; without one, the worker makes a RenderPool of `render_processes` processes and shuts
    it down when it stops (a pool passed in belongs to the caller); reports are drawn from their own task queue,
    `<task_queue>-reports`, two per render process at a time. It takes at most `limits` tasks at once. With
    `deployment`, both queues poll as that Worker Deployment version (worker/versioning.py); without, unversioned."""
    owned = RenderPool(render_processes) if render_pool is None else None
    pool = render_pool or owned
    limits = limits or WorkerLimits()
    machinery = machinery_client(client)
    activities = activities_for(client, task_queue, registry, reports_dir, lock_holder_check,
                                reports=reports, render_pool=pool, machinery=machinery)
    render_report = next(a for a in activities if getattr(a, "__func__", None) is AnalysisActivities.render_report)

    def drawing(on: Client) -> Worker:  # a report waits on the server, where any worker's free render process can take it
        return Worker(on, task_queue=report_task_queue(task_queue), activities=[render_report],
                      graceful_shutdown_timeout=graceful_shutdown, max_concurrent_activities=2 * render_processes,
                      interceptors=worker_interceptors(), deployment_config=deployment)

    def common(workflows: list[type]) -> dict[str, Any]:
        return dict(
            task_queue=task_queue, workflows=workflows,
            workflow_runner=workflow_runner(),  # the SDK's sandbox, minus two host-side costs (worker/sandbox.py)
            activities=activities,  # render_report too: stages begun before ReportWorkflow draw on this queue
            graceful_shutdown_timeout=graceful_shutdown,
            max_concurrent_workflow_tasks=limits.workflow_tasks, max_concurrent_activities=limits.activities,
            max_concurrent_local_activities=limits.local_activities, max_cached_workflows=limits.cached_workflows,
            interceptors=worker_interceptors(),  # adapter errors by kind; tracing comes with the client's interceptors
            deployment_config=deployment,
        )

    stages = Worker(machinery, nexus_service_handlers=[MachineryHandler()], **common(MACHINERY_WORKFLOWS))
    return BifrostWorker(client, render_pool=owned, drawing=drawing(client), machinery=[stages, drawing(machinery)],
                         **common(HOME_WORKFLOWS))
