"""The final state of a run that ended Canceled: an aborted rollout, revert or evacuation (workflows/controls/ending.py).

A Canceled run carries no result and no failure details, so the workflow writes its final state to the run's memo
(OUTCOME_MEMO) right before it ends. `describe().memo` also holds any memo the run was started with, which anyone may
give: the state is read from the run's own memo upsert in its history (common/own_memo.py, shared with the revert's
release reader), never from that. Reading a history needs no worker, so `bifrost status` works with none running."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle

from common.own_memo import own_canceled_state

M = TypeVar("M", bound=BaseModel)


async def canceled_outcome(handle: WorkflowHandle[Any, Any], model: type[M]) -> M | None:
    """The final state the run `handle` names (its latest run without a run id) wrote to its memo itself, if that run
    ended Canceled and the state is a `model`; else None."""
    desc = await handle.describe()  # cheap: a run still going is not read any further
    if desc.status != WorkflowExecutionStatus.CANCELED:
        return None
    # the history checks itself that it ends Canceled (another run may have started since the describe)
    raw = own_canceled_state([e async for e in handle.fetch_history_events()])
    if raw is None:
        return None
    try:
        return model.model_validate(raw)
    except ValidationError:
        return None
