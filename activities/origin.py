"""Where a stage came from: read from its rollout's OWN history, never from anything on the stage's own start.

A stage runs in the machinery namespace, started by a Nexus operation its rollout scheduled. It has no parent, and
the links and completion callback on its start are claims a hand StartWorkflowExecution can forge. What no one but
the server writes is the rollout's history: a NexusOperationScheduled event (our endpoint, service and operation)
followed by a NexusOperationStarted event whose link names the workflow run the operation started. A stage runs only
if that run is its own."""

from __future__ import annotations

from collections.abc import AsyncIterator

from pydantic import BaseModel
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError

from activities.describe import SHORT_RPC_TIMEOUT, describe_run
from common.failures import ORIGIN_NOT_YET
from common.namespaces import endpoint_name, machinery_namespace

RUN_STAGE_SERVICE, RUN_STAGE_OPERATION = "BifrostMachinery", "run_stage"  # workflows/stage/service.py
HISTORY_PAGE = 100  # events a page: the operation that started the stage is within the first page or two
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
    operation of ours is scheduled there with its start not recorded yet.

    The history is read newest first: the operation that started this run was scheduled moments ago, so the check
    reads a page, not a history that grows with every stage (the whole of it only when the answer is no)."""
    endpoint, machinery = endpoint_name(home.namespace, q.task_queue), machinery_namespace(home.namespace)
    described = await describe_run(home, q.rollout_id)
    if described is None:
        return Origin(ok=False, why=f"there is no rollout {q.rollout_id} in namespace {home.namespace}")
    names_us: set[int] = set()  # operations whose start is linked to this very stage run
    recorded: set[int] = set()  # operations whose start or end is recorded (seen first: they come later)
    pending = False
    async for event in newest_first(home, q.rollout_id, described.run_id):
        if event.event_type == EventType.EVENT_TYPE_NEXUS_OPERATION_STARTED:
            sid = event.nexus_operation_started_event_attributes.scheduled_event_id
            recorded.add(sid)
            if any(link.HasField("workflow_event") and link.workflow_event.namespace == machinery
                   and link.workflow_event.workflow_id == q.stage_id and link.workflow_event.run_id == q.run_id
                   for link in event.links):
                names_us.add(sid)
        elif event.event_type in _PENDING_ENDS:
            recorded.add(_ended(event))
        elif event.event_type == EventType.EVENT_TYPE_NEXUS_OPERATION_SCHEDULED:
            a = event.nexus_operation_scheduled_event_attributes
            if (a.endpoint, a.service, a.operation) != (endpoint, RUN_STAGE_SERVICE, RUN_STAGE_OPERATION):
                continue  # another endpoint's or operation's start proves nothing
            if event.event_id in names_us:
                return Origin(ok=True, rollout_run_id=described.run_id)
            pending = pending or event.event_id not in recorded
    if pending and described.status == WorkflowExecutionStatus.RUNNING:
        raise ApplicationError(f"{q.rollout_id} has scheduled a stage whose start is not recorded yet", type=ORIGIN_NOT_YET)
    return Origin(ok=False, why=(f"the rollout {q.rollout_id} (run {described.run_id}) started no run {q.run_id} of "
                                 f"{q.stage_id} through Bifrost's endpoint {endpoint}"))


async def newest_first(client: Client, workflow_id: str, run_id: str, page: int = HISTORY_PAGE
                       ) -> AsyncIterator[HistoryEvent]:
    """A run's history events, newest first (GetWorkflowExecutionHistoryReverse), a page at a time."""
    token = b""
    while True:
        resp = await client.workflow_service.get_workflow_execution_history_reverse(
            GetWorkflowExecutionHistoryReverseRequest(
                namespace=client.namespace, execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
                maximum_page_size=page, next_page_token=token),
            retry=True, timeout=SHORT_RPC_TIMEOUT)
        for event in resp.history.events:
            yield event
        token = resp.next_page_token
        if not token:
            return
