"""The final state of a run that ended Canceled: an aborted rollout or evacuation (workflows/ending.py).

A Canceled run carries no result and no failure details, so the workflow writes its final state to the run's memo
(OUTCOME_MEMO) right before it ends. The memo is believed only of a run whose status is Canceled: only Bifrost's
code ends these workflows Canceled, and it always writes the memo first (overwriting any memo set at start)."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle

from common.failures import OUTCOME_MEMO

M = TypeVar("M", bound=BaseModel)


async def canceled_outcome(handle: WorkflowHandle[Any, Any], model: type[M]) -> M | None:
    """The memo's final state of the run `handle` names (its latest run without a run id), if that run ended
    Canceled and its memo holds a `model`; else None."""
    desc = await handle.describe()
    if desc.status != WorkflowExecutionStatus.CANCELED:
        return None
    raw = await desc.memo_value(OUTCOME_MEMO, None)
    if raw is None:
        return None
    try:
        return model.model_validate(raw)
    except ValidationError:
        return None
