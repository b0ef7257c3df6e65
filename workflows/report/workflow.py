"""ReportWorkflow: draws and stores one canary or soak report, apart from the stage that judged it.

A stage (or an evacuation) starts it as its child and moves on: neither the verdict nor the stage's end waits for a picture, and a busy
render pool delays only the pictures. A report that cannot be drawn is recorded in this workflow's result,
never as a failure of the rollout (the verdict does not depend on it).
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from activities.analysis import AnalysisActivities
    from activities.errors import error_text
    from activities.models import ReportInput
    from common.types import INVALID_PAYLOAD
    from workflows import options
    from workflows.parentage import report_refusal
    from workflows.report.models import ReportOutcome


def report_task_queue(task_queue: str) -> str:
    """`<task queue>-reports`: drawing has its own activity slots, so a burst of reports never makes a deploy,
    promote or rollback wait for a slot (every Bifrost worker polls both queues)."""
    return f"{task_queue}-reports"


def report_workflow_id(stage_workflow_id: str, analysis_id: str) -> str:
    """`<stage workflow id>/report/<analysis id>`: one per analysis, so a retried start finds the first one."""
    return f"{stage_workflow_id}/report/{analysis_id}"


async def start_report(report: ReportInput, summary: str) -> None:
    """From a workflow: have a ReportWorkflow draw and store `report`, waiting only until it has started (its id is
    `<this workflow's id>/report/<analysis id>`, abandoned when this one closes). Stages and evacuations both use it."""
    try:
        await workflow.start_child_workflow(
            ReportWorkflow.run, report, id=report_workflow_id(workflow.info().workflow_id, report.analysis_id),
            task_queue=workflow.info().task_queue, parent_close_policy=workflow.ParentClosePolicy.ABANDON,
            static_summary=summary,
        )
    except WorkflowAlreadyStartedError:
        pass  # a retried look asked again: the first one draws it


@workflow.defn(failure_exception_types=options.FAIL_ON_BUGS)
class ReportWorkflow:
    """Runs `render_report` once (with its retries) and returns where the page is, or why there is none."""

    @workflow.run
    async def run(self, report: ReportInput) -> ReportOutcome:
        # started by hand, or under an id or key its parent would not give it, it could write over a real report
        refusal = report_refusal(report.rollout_id, report.analysis_id, report.stage.key, workflow.info())
        if refusal is not None:
            raise ApplicationError(refusal, type=INVALID_PAYLOAD, non_retryable=True)
        try:
            ref = await workflow.execute_activity_method(
                AnalysisActivities.render_report, report, summary=f"draw {report.analysis_id}",
                task_queue=report_task_queue(workflow.info().task_queue), **options.REPORT)
        except ActivityError as err:
            return ReportOutcome(url=None, error=error_text(err))
        return ReportOutcome(url=ref.url, size_bytes=ref.size_bytes)
