"""Lock activity: signal-with-start the service lock on behalf of a rollout (needs a Temporal client)."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from workflows.lock import LockRequest, LockState, ServiceLockWorkflow, lock_id


class LockActivities:
    """Holds the client used to reach the lock workflow."""

    def __init__(self, client: Client, task_queue: str, holder_check: timedelta | None = None) -> None:
        self.client = client
        self.task_queue = task_queue
        self.holder_check = holder_check

    @activity.defn(name="request_service_lock")
    async def request_service_lock(self, req: LockRequest) -> None:
        service = req.service
        await self.client.start_workflow(
            ServiceLockWorkflow.run,
            LockState(service=service, **({"holder_check_seconds": self.holder_check.total_seconds()}
                                          if self.holder_check else {})),
            id=lock_id(service),
            task_queue=self.task_queue,
            start_signal="acquire",
            start_signal_args=[req],
            static_summary=f"one rollout at a time for {service}",
            task_timeout=timedelta(seconds=10),
        )

    @activity.defn(name="rollout_is_running")
    async def rollout_is_running(self, workflow_id: str) -> bool:
        """False once the rollout has closed (completed, failed, terminated) or does not exist."""
        try:
            desc = await self.client.get_workflow_handle(workflow_id).describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return desc.status == WorkflowExecutionStatus.RUNNING
