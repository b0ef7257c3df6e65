"""A stage the rollout started through Nexus, seen as the rollout saw a child workflow: done, its result or failure.

The stage runs in the machinery namespace (common/namespaces.py), started by the `run_stage` operation of Bifrost's
endpoint for this namespace and task queue (workflows/stage/service.py). Cancelling the operation (WAIT_COMPLETED)
asks the stage to cancel and waits until it has closed, as the parent-close policy REQUEST_CANCEL did for a child."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from temporalio import workflow
from temporalio.exceptions import ApplicationError, FailureError

with workflow.unsafe.imports_passed_through():
    from common.namespaces import endpoint_name
    from common.types import OUTCOME_FAILURE_TYPES
    from workflows.stage.models import StageInput, StageState
    from workflows.stage.service import PIN_HEADER, Machinery, stage_summary

STARTED_ELSEWHERE = "WorkflowExecutionAlreadyStarted"  # the handler's start found the stage's id taken (a previous run's)


class StageRun:
    """One stage's operation: started with `start`, then `done`, `result`, `exception` like a child's handle."""

    def __init__(self, handle: workflow.NexusOperationHandle[StageState]) -> None:
        self.handle = handle
        self._task: asyncio.Future[StageState] = asyncio.ensure_future(handle)

    @staticmethod
    async def start(inp: StageInput) -> StageRun:
        """Start the stage of `inp` in the machinery namespace; raise the operation's error if it could not start."""
        info = workflow.info()
        client = workflow.create_nexus_client(service=Machinery, endpoint=endpoint_name(info.namespace, info.task_queue))
        build = info.get_current_deployment_version()  # the stage runs on the rollout's build, as a child did
        handle = await client.start_operation(
            Machinery.run_stage, inp, summary=stage_summary(inp),
            cancellation_type=workflow.NexusOperationCancellationType.WAIT_COMPLETED,
            headers={PIN_HEADER: build.to_canonical_string()} if build is not None and build.deployment_name else None)
        return StageRun(handle)

    def done(self) -> bool:
        return self._task.done()

    def result(self) -> StageState:
        return self._task.result()

    def exception(self) -> BaseException | None:
        return self._task.exception()

    def cancel(self) -> None:
        self.handle.cancel()


def _chain(err: BaseException) -> Iterator[BaseException]:
    """`err` and its causes, through Temporal's failure causes and Python's."""
    seen: BaseException | None = err
    while seen is not None:
        yield seen
        seen = seen.cause if isinstance(seen, FailureError) else seen.__cause__


def already_started(err: BaseException) -> bool:
    """The operation could not start because the stage's workflow id is taken (a previous run's stage still runs)."""
    return any(STARTED_ELSEWHERE in text or "already started" in text.lower() or "AlreadyStarted" in text
               for text in (f"{type(seen).__name__} {seen}" for seen in _chain(err)))


def stage_failure(err: BaseException) -> ApplicationError | None:
    """The stage's own failure (RolledBack, Failed: carrying its state) inside the operation's error chain."""
    return next((seen for seen in _chain(err) if isinstance(seen, ApplicationError)
                 and seen.type in OUTCOME_FAILURE_TYPES.values() and seen.details), None)

