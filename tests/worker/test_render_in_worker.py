"""A real worker (build_worker) on the dev server: the verdict's link opens over HTTP once render_report has run.

A small test workflow stands in for the stage workflow: it judges, starts render_report without waiting,
and awaits it at the end, as the stage does. The history must not hold the samples."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from pydantic import BaseModel
from temporalio import workflow
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.adapters.registry import AdapterRegistry
from activities.adapters.reports import LocalReportStore
from activities.adapters.simulated import FleetScenario, SimulatedFleet, VersionEffect
from activities.analysis import AnalysisActivities
from activities.models import AnalysisInput, AnalysisResult, ReportInput, ReportRef
from tests.activities.test_analysis import analysis_input
from worker.build import BifrostWorker, build_worker
from worker.reports_http import ReportServer


class Job(BaseModel):
    analysis: AnalysisInput
    activity_queue: str


class Outcome(BaseModel):
    analysis: AnalysisResult
    report: ReportRef


@workflow.defn(sandboxed=False)
class JudgeThenDraw:
    @workflow.run
    async def run(self, job: Job) -> Outcome:
        analysis = await workflow.execute_activity_method(
            AnalysisActivities.analyze_canary, job.analysis, task_queue=job.activity_queue,
            start_to_close_timeout=timedelta(seconds=60),
        )
        drawing = workflow.start_activity_method(
            AnalysisActivities.render_report, ReportInput.for_canary(job.analysis, analysis.result),
            task_queue=job.activity_queue, start_to_close_timeout=timedelta(minutes=2), heartbeat_timeout=timedelta(seconds=20),
        )
        # ... the stage would promote or roll back here, while the report is drawn ...
        return Outcome(analysis=analysis, report=await drawing)


async def test_the_verdicts_link_opens_once_the_worker_has_drawn_the_report(env, task_queue: str, tmp_path: Path):
    fleet = SimulatedFleet(FleetScenario(fresh_draws=False, initial_version="1.9.0", effects=[VersionEffect(version="2.1.0", error_factor=5.0)]))
    with ReportServer(tmp_path / "reports") as server:
        store = LocalReportStore(server.root, server.url)
        activities = build_worker(env.client, AdapterRegistry.simulated(fleet), task_queue=task_queue, reports=store)
        assert isinstance(activities, BifrostWorker) and activities.render_pool is not None  # the worker owns its pool
        flows = Worker(env.client, task_queue=task_queue + "-wf", workflows=[JudgeThenDraw],
                       workflow_runner=UnsandboxedWorkflowRunner())
        async with activities, flows:
            job = Job(analysis=analysis_input(minutes=1200, canary="2.1.0"), activity_queue=task_queue)
            handle = await env.client.start_workflow(JudgeThenDraw.run, job, id=f"render-{task_queue}",
                                                     task_queue=task_queue + "-wf")
            out = await handle.result()
        with pytest.raises(RuntimeError, match="after shutdown"):  # the pool stopped with the worker
            activities.render_pool.submit(int)

        assert out.analysis.result.verdict == "fail"
        assert out.report.url == out.analysis.report_url and out.report.url.startswith(server.url + "/")
        page = httpx.get(out.report.url)
        assert page.status_code == 200 and "FAIL — score" in page.text and page.text.count("<img alt='Time series of") == 2

        biggest = 0
        async for event in handle.fetch_history_events():
            for attr in ("activity_task_scheduled_event_attributes", "activity_task_completed_event_attributes"):
                if event.HasField(attr):
                    body = getattr(event, attr)
                    payloads = body.input.payloads if attr.endswith("scheduled_event_attributes") else body.result.payloads
                    biggest = max([biggest, *(len(p.data) for p in payloads)])
        # 1200 samples per side and metric would be ~90 KB as JSON; inputs and results carry none of them
        assert 0 < biggest < 8_000
