"""Where a stage came from: read from its rollout's OWN history, never from anything on the stage's own start.

A stage runs in the machinery namespace, started by a Nexus operation its rollout scheduled. It has no parent, and
the links and completion callback on its start are claims a hand StartWorkflowExecution can forge. What no one but
the server writes is the rollout's history: a NexusOperationScheduled event (our endpoint, service and operation)
followed by a NexusOperationStarted event whose link names the workflow run the operation started. A stage runs only
if that run is its own."""

from __future__ import annotations

from pydantic import BaseModel
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError

from activities.describe import describe_run
from common.failures import ORIGIN_NOT_YET
from common.namespaces import endpoint_name, machinery_namespace

RUN_STAGE_SERVICE, RUN_STAGE_OPERATION = "BifrostMachinery", "run_stage"  # workflows/stage/service.py
_PENDING_ENDS = {EventType.EVENT_TYPE_NEXUS_OPERATION_COMPLETED, EventType.EVENT_TYPE_NEXUS_OPERATION_FAILED,
                 EventType.EVENT_TYPE_NEXUS_OPERATION_CANCELED, EventType.EVENT_TYPE_NEXUS_OPERATION_TIMED_OUT}


class OriginQuery(BaseModel):
    """Did rollout `rollout_id` start run `run_id` of stage `stage_id` (on `task_queue`) through Bifrost's endpoint?"""

    rollout_id: str
    stage_id: str
    run_id: str
    task_queue: str


class Origin(BaseModel):
    """`ok` with the rollout's run that started the stage, or not and why (one line for the stage's failure)."""

    ok: bool
    why: str = ""
    rollout_run_id: str = ""


def _ended(attrs_event: HistoryEvent) -> int:
    for name in ("nexus_operation_completed_event_attributes", "nexus_operation_failed_event_attributes",
                 "nexus_operation_canceled_event_attributes", "nexus_operation_timed_out_event_attributes"):
        if attrs_event.HasField(name):
            return int(getattr(attrs_event, name).scheduled_event_id)
    return 0


async def find_origin(home: Client, q: OriginQuery) -> Origin:
    """The rollout's run whose history shows it started this stage run; raise NOT_YET (retryable) while an
    operation of ours is scheduled there with its start not recorded yet."""
    endpoint, machinery = endpoint_name(home.namespace, q.task_queue), machinery_namespace(home.namespace)
    described = await describe_run(home, q.rollout_id)
    if described is None:
        return Origin(ok=False, why=f"there is no rollout {q.rollout_id} in namespace {home.namespace}")
    scheduled: set[int] = set()
    pending: set[int] = set()
    async for event in home.get_workflow_handle(q.rollout_id, run_id=described.run_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_NEXUS_OPERATION_SCHEDULED:
            a = event.nexus_operation_scheduled_event_attributes
            if (a.endpoint, a.service, a.operation) == (endpoint, RUN_STAGE_SERVICE, RUN_STAGE_OPERATION):
                scheduled.add(event.event_id)
                pending.add(event.event_id)
        elif event.event_type == EventType.EVENT_TYPE_NEXUS_OPERATION_STARTED:
            sid = event.nexus_operation_started_event_attributes.scheduled_event_id
            pending.discard(sid)
            if sid in scheduled and any(
                    link.HasField("workflow_event") and link.workflow_event.namespace == machinery
                    and link.workflow_event.workflow_id == q.stage_id and link.workflow_event.run_id == q.run_id
                    for link in event.links):
                return Origin(ok=True, rollout_run_id=described.run_id)
        elif event.event_type in _PENDING_ENDS:
            pending.discard(_ended(event))
    if pending and described.status == WorkflowExecutionStatus.RUNNING:
        raise ApplicationError(f"{q.rollout_id} has scheduled a stage whose start is not recorded yet", type=ORIGIN_NOT_YET)
    return Origin(ok=False, why=(f"the rollout {q.rollout_id} (run {described.run_id}) started no run {q.run_id} of "
                                 f"{q.stage_id} through Bifrost's endpoint {endpoint}"))
