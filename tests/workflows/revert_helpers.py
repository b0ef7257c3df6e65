"""Helpers for revert tests and recordings: a finished release to undo, and a revert started the way the CLI does."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from activities.notify import NotifyActivities
from bifrost_cli.revert import revert_outcome as cli_revert_outcome
from common.types import Notification
from tests.workflows.helpers import replaced_activity
from workflows.revert.models import RevertInput, RevertState
from workflows.revert.workflow import RevertWorkflow

FAST = {"health_minutes": 1 / 60}  # the simulated fleet gives every window its minimum of samples


def revert_input(service: str, to_version: str = "1.0.0", **overrides: Any) -> RevertInput:
    data: dict[str, Any] = {"service": service, "to_version": to_version, "requested_by": "alice",
                            "reason": "INC-7: 2.0.0 corrupts receipts", **FAST, **overrides}
    return RevertInput.model_validate(data)


async def listed_closed(client: Client, workflow_id: str, timeout: float = 30) -> None:
    """Wait until the visibility list shows `workflow_id` closed (the revert finds its release through the list)."""
    async with asyncio.timeout(timeout):
        while True:
            async for wf in client.list_workflows(f"WorkflowId = '{workflow_id}'"):
                if wf.status != WorkflowExecutionStatus.RUNNING:
                    return
            await asyncio.sleep(0.2)


async def start_revert(client: Client, inp: RevertInput, task_queue: str) -> WorkflowHandle[Any, RevertState]:
    return await client.start_workflow(RevertWorkflow.run, inp, id=inp.workflow_id, task_queue=task_queue)


async def revert_outcome(handle: WorkflowHandle[Any, RevertState]) -> tuple[RevertState, str]:
    """The final state and the failure's message ('' when it reverted), as `bifrost revert --wait` reads them."""
    state, failure = await cli_revert_outcome(handle)
    assert state is not None, failure
    return state, failure


@contextmanager
def notices_sent() -> Iterator[list[Notification]]:
    """Workers started inside record every notification the `notify` activity is asked to send (then send it)."""
    sent: list[Notification] = []

    def make(original: Any) -> Any:
        async def recording(self, n: Notification) -> bool:  # type: ignore[no-untyped-def]
            sent.append(n)
            result: bool = await original(self, n)
            return result
        return recording

    with replaced_activity(NotifyActivities, "notify", make):
        yield sent
