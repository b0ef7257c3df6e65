"""Reports are drawn by ReportWorkflow children the stage starts and does not wait for.

The stage's verdict carries the link before the picture exists; the child stores the page at that link,
and a store that refuses the page costs the report only, never the rollout."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from activities.adapters.registry import AdapterRegistry
from activities.adapters.reports import LocalReportStore, ReportError
from bifrost_cli.ops import outcome
from tests.conftest import shared_render_pool
from tests.workflows.helpers import fleet, make_request, start
from worker.build import build_worker
from worker.endpoints import machinery_client
from worker.limits import WorkerLimits
from workflows.report.models import ReportOutcome
from workflows.report.workflow import report_task_queue

ONE_REGION = [{"name": "eu-west-1", "traffic_share": 1.0}]


async def report_children(client: Client, stage_id: str) -> tuple[list[str], list[str]]:
    """The ReportWorkflow ids a stage started, and the activity types it scheduled itself."""
    children: list[str] = []
    activities: list[str] = []
    async for event in client.get_workflow_handle(stage_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            attrs = event.start_child_workflow_execution_initiated_event_attributes
            if attrs.workflow_type.name == "ReportWorkflow":
                children.append(attrs.workflow_id)
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            activities.append(event.activity_task_scheduled_event_attributes.activity_type.name)
    return children, activities


async def test_each_verdict_links_the_page_its_report_workflow_stored(env, task_queue, tmp_path: Path):
    req = make_request(regions=ONE_REGION, blast_radius={"canary_region": "eu-west-1"})
    store = LocalReportStore(tmp_path, "http://reports.example.com")
    async with build_worker(env.client, AdapterRegistry.simulated(fleet()), task_queue=task_queue, reports=store,
                            render_pool=shared_render_pool()):
        handle = await start(env.client, req, task_queue)
        result = await outcome(handle)
        assert result.status == "succeeded", result.reason
        for stage in result.stages:
            children, activities = await report_children(machinery_client(env.client), f"{handle.id}/{stage.key}")
            assert "render_report" not in activities  # the stage never draws: its child does
            assert len(children) == 1 and children[0].startswith(f"{handle.id}/{stage.key}/report/")
            drawn = await machinery_client(env.client).get_workflow_handle(children[0], result_type=ReportOutcome).result()
            assert drawn.error is None and drawn.url == stage.report_url
            page = tmp_path / drawn.url.removeprefix("http://reports.example.com/")
            assert page.stat().st_size == drawn.size_bytes and "PASS — score" in page.read_text()


class RefusingStore(LocalReportStore):
    """A folder whose writes are refused for good, as a read-only volume would."""

    async def put(self, key: str, html: str) -> str:
        raise ReportError("store the report", target=key, status="EROFS", hint="mount the reports folder writable",
                          retryable=False)


async def test_a_store_that_refuses_the_page_costs_the_report_not_the_rollout(env, task_queue, tmp_path: Path):
    req = make_request(regions=ONE_REGION, blast_radius={"canary_region": "eu-west-1"})
    f = fleet()
    async with build_worker(env.client, AdapterRegistry.simulated(f), task_queue=task_queue,
                            reports=RefusingStore(tmp_path, None), render_pool=shared_render_pool()):
        handle = await start(env.client, req, task_queue)
        result = await outcome(handle)
        children, _ = await report_children(machinery_client(env.client), f"{handle.id}/eu-west-1/prod")
        drawn = await machinery_client(env.client).get_workflow_handle(children[0], result_type=ReportOutcome).result()
    assert result.status == "succeeded" and f.snapshot()[f"{req.service}/eu-west-1/prod"]["primary"] == req.version
    assert drawn.url is None and drawn.error is not None
    assert "store the report" in drawn.error and "mount the reports folder writable" in drawn.error
    assert not list(tmp_path.rglob("*.html"))


class HeldPool(Executor):
    """Draws nothing until released (then draws in a thread): a render pool that is busy for as long as a test likes."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.waiting = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self.waiting += 1

        def draw() -> None:
            self.release.wait()
            future.set_result(fn(*args, **kwargs))

        threading.Thread(target=draw, daemon=True).start()
        return future


async def test_reports_waiting_for_a_busy_render_pool_hold_no_slot_a_rollout_needs(env, task_queue, tmp_path: Path):
    """One activity slot, every drawing stuck: the rollout still runs to the end, because reports are drawn from
    their own task queue with their own slots; the pages appear once the pool draws again."""
    req = make_request(regions=ONE_REGION, blast_radius={"canary_region": "eu-west-1"})
    pool = HeldPool()
    async with build_worker(env.client, AdapterRegistry.simulated(fleet()), task_queue=task_queue,
                            reports=LocalReportStore(tmp_path, None), render_pool=pool,
                            limits=WorkerLimits(activities=1)):
        handle = await start(env.client, req, task_queue)
        result = await asyncio.wait_for(outcome(handle), timeout=60)
        assert result.status == "succeeded", result.reason
        # a stage waits only for its ReportWorkflow's start: the prod stage's drawing may reach the pool after the
        # rollout ended, so wait for the pool itself to hold both
        deadline = asyncio.get_running_loop().time() + 30
        while pool.waiting < 2 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
        assert pool.waiting == 2 and not list(tmp_path.rglob("*.html"))  # both stages' reports still undrawn
        pool.release.set()
        for stage in result.stages:
            children, _ = await report_children(machinery_client(env.client), f"{handle.id}/{stage.key}")
            drawing = machinery_client(env.client).get_workflow_handle(children[0], result_type=ReportOutcome)
            drawn = await drawing.result()
            assert drawn.error is None and drawn.url == stage.report_url
            queues = [e.activity_task_scheduled_event_attributes.task_queue.name async for e in drawing.fetch_history_events()
                      if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
            assert queues == [report_task_queue(task_queue)]
    assert len(list(tmp_path.rglob("*.html"))) == 2
