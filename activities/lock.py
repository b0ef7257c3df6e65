"""Lock activity: signal-with-start the service lock on behalf of a rollout (needs a Temporal client)."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity
from temporalio.client import Client

from workflows.lock import LockRequest, LockState, ServiceLockWorkflow, lock_id


class LockActivities:
    """Holds the client used to reach the lock workflow."""

    def __init__(self, client: Client, task_queue: str) -> None:
        self.client = client
        self.task_queue = task_queue

    @activity.defn(name="request_service_lock")
    async def request_service_lock(self, req: LockRequest) -> None:
        service = req.service
        await self.client.start_workflow(
            ServiceLockWorkflow.run,
            LockState(service=service),
            id=lock_id(service),
            task_queue=self.task_queue,
            start_signal="acquire",
            start_signal_args=[req],
            static_summary=f"one rollout at a time for {service}",
            task_timeout=timedelta(seconds=10),
        )
