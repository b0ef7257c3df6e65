"""How another workflow runs a traffic change: the EvacuationWorkflow as a child (`traffic/<service>`), the one
way a stage, a revert, the guard or a drill evacuates or restores a region, and how it ended (`TrafficChange`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from temporalio import workflow
from temporalio.exceptions import ApplicationError, ChildWorkflowError, WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from activities.errors import error_text
    from activities.traffic.shift import REFUSED
    from workflows.evacuation.models import EvacuationState
    from workflows.evacuation.settings import EvacuationInput, evacuation_id

# The workflow type, by name: this module sits below the workflow (whose callers import it from here).
EVACUATION_WORKFLOW = "EvacuationWorkflow"


@dataclass(frozen=True)
class TrafficChange:
    """How a child evacuation or restore ended: its state, or why it did not start or did not finish."""

    move: EvacuationInput
    state: EvacuationState | None = None  # the result; a failed child's state when its failure carried it
    completed: bool = False  # the child ran to its end (any status); false: not started or failed
    busy: bool = False  # not started: another traffic change of the service runs (its id is evacuation_id)
    refused: bool = False  # the child failed with REFUSED: it changed nothing
    why: str = ""  # the child's failure in its own words (the guard's and the drill's records)
    text: str = ""  # the same failure as one redacted line (error_text)

    @property
    def line(self) -> str:
        """One line on how it ended, for a stage's or a revert's reason."""
        m = self.move
        if self.busy:
            return (f"could not {m.direction} {m.region}: another traffic change of {m.service} is running "
                    f"({evacuation_id(m.service)})")
        if not self.completed or self.state is None:
            return f"could not {m.direction} {m.region}: {self.text}"
        done = self.state
        return f"{m.direction} of {m.region}: {done.status}" + (f" ({done.reason})" if done.reason else "")


async def run_traffic_change(
    move: EvacuationInput, *, summary: str,
    parent_close_policy: workflow.ParentClosePolicy = workflow.ParentClosePolicy.REQUEST_CANCEL,
    shield: Callable[[Awaitable[EvacuationState]], Awaitable[EvacuationState]] | None = None,
) -> TrafficChange:
    """Run `move` as a child EvacuationWorkflow (`traffic/<service>`) and map how it ended; never raises for it.

    `shield`: a caller that must finish what it started (a stage) wraps the child so a cancellation is noted."""
    child: Awaitable[EvacuationState] = workflow.execute_child_workflow(
        EVACUATION_WORKFLOW, move, result_type=EvacuationState, id=evacuation_id(move.service),
        task_queue=workflow.info().task_queue, parent_close_policy=parent_close_policy, static_summary=summary)
    try:
        done = await (shield(child) if shield is not None else child)
    except WorkflowAlreadyStartedError:
        return TrafficChange(move, busy=True)
    except ChildWorkflowError as err:
        cause = err.cause
        failed = None
        if isinstance(cause, ApplicationError) and cause.details:
            failed = EvacuationState.model_validate(cause.details[0])
        return TrafficChange(move, state=failed, why=cause.message if isinstance(cause, ApplicationError) else str(cause),
                             refused=isinstance(cause, ApplicationError) and cause.type == REFUSED, text=error_text(err))
    return TrafficChange(move, state=done, completed=True)
