"""A stage's reports can overtake its start: the rollout must still take them.

Under load a rollout's workflow task can be late (it timed out on a busy worker in `benchmarks/scale.py`),
so the task that tells it "your stage has started" also carries that stage's reports, and the SDK applies
signals before the start. The rollout used to drop such reports, and a stage that had reported "succeeded,
awaiting the verdict" then waited for a verdict that never came, holding the service lock. This test makes
the task late on purpose: the rollout fails the activations that confirm its first stage's start until one
carries every report that stage sent, as a task retried after timing out on a busy worker would.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.client import Client
from temporalio.worker import Worker, WorkflowInstance, WorkflowInstanceDetails, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from activities.adapters.registry import AdapterRegistry
from activities.adapters.reports import NoReports
from bifrost_cli.ops import outcome
from tests.workflows.helpers import fleet, make_request, start
from worker.build import HOME_WORKFLOWS, MACHINERY_WORKFLOWS, activities_for
from worker.endpoints import ensure_endpoint, machinery_client
from worker.machinery import MachineryHandler
from workflows.stage.models import StageDetail
from workflows.stage.workflow import StageWorkflow


class LateStartRunner(WorkflowRunner):
    """The sandbox, except that the rollout fails each new activation confirming a stage's start until one also
    carries `expected` reports of that stage (as a task that timed out on a busy worker would be retried)."""

    def __init__(self) -> None:
        self.inner = SandboxedWorkflowRunner()
        self.expected: int | None = None  # set by the test once the stage has sent all its reports
        self.held = 0

    def prepare_workflow(self, defn: Any) -> None:
        self.inner.prepare_workflow(defn)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        instance = self.inner.create_instance(det)
        return _Holding(instance, self) if det.defn.name == "RolloutWorkflow" else instance

    def set_worker_level_failure_exception_types(self, types: Any) -> None:
        self.inner.set_worker_level_failure_exception_types(types)


class _Holding(WorkflowInstance):
    def __init__(self, inner: WorkflowInstance, runner: LateStartRunner) -> None:
        self.inner, self.runner = inner, runner

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        kinds = [j.WhichOneof("variant") for j in act.jobs]
        reports = sum(1 for j in act.jobs if j.WhichOneof("variant") == "signal_workflow"
                      and j.signal_workflow.signal_name == "stage_progress")
        expected = self.runner.expected
        if "resolve_nexus_operation_start" in kinds and not act.is_replaying and (
                expected is None or reports < expected):
            self.runner.held += 1
            time.sleep(0.3)  # well under the SDK's 2 s deadlock detector; Temporal retries the task at once
            raise RuntimeError("held back on purpose: retried until the stage's reports come with its start")
        return self.inner.activate(act)

    def get_serialization_context(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.get_serialization_context(*args, **kwargs)

    def get_external_store_context(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.get_external_store_context(*args, **kwargs)

    def get_info(self) -> Any:
        return self.inner.get_info()


async def _reports_sent(client: Client, stage_id: str) -> int | None:
    """How many reports the stage sent, once it waits for the rollout's verdict and all have been delivered."""
    try:
        detail = await client.get_workflow_handle(stage_id).query(StageWorkflow.progress, result_type=StageDetail)
    except Exception:  # noqa: BLE001 - not started yet
        return None
    if not detail.state.awaiting_verdict:
        return None
    events = [e async for e in client.get_workflow_handle(stage_id).fetch_history_events()]
    signals = {e.event_id for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
               and e.activity_task_scheduled_event_attributes.activity_type.name == "signal_workflow"}
    done = sum(1 for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
               and e.activity_task_completed_event_attributes.scheduled_event_id in signals)
    return len(signals) if signals and done == len(signals) else None


async def test_reports_that_arrive_with_the_stages_start_are_taken(env, task_queue, tmp_path: Path):
    req = make_request(regions=[{"name": "eu-west-1", "traffic_share": 1.0}], blast_radius={"canary_region": "eu-west-1"})
    runner = LateStartRunner()
    acts = activities_for(env.client, task_queue, AdapterRegistry.simulated(fleet()), tmp_path, reports=NoReports())
    machinery = machinery_client(env.client)
    await ensure_endpoint(env.client, task_queue)
    async with Worker(env.client, task_queue=task_queue, workflows=HOME_WORKFLOWS, activities=acts, workflow_runner=runner), \
            Worker(machinery, task_queue=task_queue, workflows=MACHINERY_WORKFLOWS, activities=acts,
                   nexus_service_handlers=[MachineryHandler()]):
        handle = await start(env.client, req, task_queue)
        first = f"{handle.id}/eu-west-1/test"
        async with asyncio.timeout(60):
            while (sent := await _reports_sent(machinery, first)) is None:
                await asyncio.sleep(0.1)
        runner.expected = sent
        result = await asyncio.wait_for(outcome(handle), timeout=60)
        history = [e async for e in handle.fetch_history_events()]

    assert result.status == "succeeded", result.reason
    assert [(s.key, s.version_now) for s in result.stages] == [("eu-west-1/test", req.version), ("eu-west-1/prod", req.version)]
    # the task that confirmed the start was held at least once, and when taken it carried every report
    assert runner.held >= 1
    started = next(e.event_id for e in history if e.event_type == EventType.EVENT_TYPE_NEXUS_OPERATION_STARTED)
    taken = next(e.event_id for e in history
                 if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED and e.event_id > started)
    together = [e for e in history if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
                and e.workflow_execution_signaled_event_attributes.signal_name == "stage_progress" and e.event_id < taken]
    assert len(together) == runner.expected
