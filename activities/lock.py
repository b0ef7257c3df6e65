"""Lock activities: reach the service lock workflow on behalf of a rollout (they need a Temporal client)."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from common.lock import ACQUIRE_SIGNAL, LOCK_WORKFLOW, LockRequest, LockState, lock_id


class LockActivities:
    """Holds the client used to reach the lock workflow."""

    def __init__(self, client: Client, task_queue: str, holder_check: timedelta | None = None) -> None:
        self.client = client
        self.task_queue = task_queue
        self.holder_check = holder_check

    @activity.defn
    async def request_service_lock(self, req: LockRequest) -> None:
        """Signal-with-start the service's lock: atomic, so racing rollouts are ordered by the server."""
        state = LockState(service=req.service)
        if self.holder_check is not None:
            state.holder_check_seconds = self.holder_check.total_seconds()
        await self.client.start_workflow(
            LOCK_WORKFLOW,
            state,
            id=lock_id(req.service),
            task_queue=self.task_queue,
            start_signal=ACQUIRE_SIGNAL,
            start_signal_args=[req],
            static_summary=f"one rollout at a time for {req.service}",
            task_timeout=timedelta(seconds=10),
        )

    @activity.defn
    async def rollout_is_running(self, workflow_id: str) -> bool:
        """False once the rollout has closed (completed, failed, terminated) or does not exist."""
        try:
            desc = await self.client.get_workflow_handle(workflow_id).describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return desc.status == WorkflowExecutionStatus.RUNNING
