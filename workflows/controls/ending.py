"""Ending a stopped workflow Canceled, so Temporal's own status (the Web UI's default list) tells it apart from a
failure: an aborted rollout, evacuation or revert, and a rejected rollout (a person or a gate said no; Failed is
kept for a release that went wrong).

Python SDK 1.35 ends a run Canceled only when a cancellation request reached it and the workflow then raises
`asyncio.CancelledError`. A Request Cancellation from the Web UI is such a request; an abort update, a rollback
update or a supersession is not, so the workflow asks for its own cancellation through an activity (the server
refuses a workflow's command to cancel itself) and waits for the request to arrive. A Canceled run carries no
result and no failure details, so the final state is written to the run's memo (OUTCOME_MEMO) first; readers take
it only from this upsert in the run's history, never from a memo given at start (common/own_memo.py).

A run stopped by a cancellation request names who sent it (`name_canceller`), the same way in every workflow.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel
from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.errors import error_text
    from activities.peers import CancelRequest, CancelRequestQuery, CancelRun, PeerActivities
    from common.failures import OUTCOME_MEMO
    from workflows import options
    from workflows.controls import Controls

# An aborted rollout, evacuation or revert, or a rejected rollout, ends Canceled, its final state in the memo.
CANCEL_REASON = "workflow cancellation requested"  # a run's stop reason until `name_canceller` names who sent it


def self_cancel_reason(outcome: str) -> str:
    """The reason of the cancellation a run asks for itself: what happened, and where its final state is."""
    return f"Bifrost: {outcome}; the run ends Canceled (its final state is the bifrost_outcome memo)"


async def end_canceled(state: BaseModel, noun: str, outcome: str = "aborted") -> None:
    """Write `state` to the memo, make sure a cancellation request reached this run, and end it Canceled (raises
    asyncio.CancelledError). Returns only if no cancellation could be requested: the caller then fails as before."""
    workflow.upsert_memo({OUTCOME_MEMO: state.model_dump(mode="json")})
    if workflow.cancellation_reason() is None:
        info = workflow.info()
        try:
            await workflow.execute_activity_method(
                PeerActivities.cancel_run, CancelRun(workflow_id=info.workflow_id, run_id=info.run_id,
                                                     reason=self_cancel_reason(outcome)),
                summary=f"end the {outcome} {noun} Canceled", **options.CONFIRM)
            # The server recorded the request; the next workflow task brings it (and cancels this wait).
            await workflow.wait_condition(lambda: workflow.cancellation_reason() is not None)
        except asyncio.CancelledError:
            pass  # the request arrived
        except ActivityError as err:
            if workflow.cancellation_reason() is None:
                workflow.logger.warning("could not end the %s %s Canceled: %s", outcome, noun, error_text(err))
                return
    raise asyncio.CancelledError(f"the {noun} was {outcome}")


async def name_canceller(controls: Controls[Any]) -> str:
    """Read who requested this run's cancellation from its history, through an activity (workflow code sees only the
    request's reason), write it in the audit trail, and return the reason the run ends with. The identity is what
    the client sent (self-reported): it attributes, it decides nothing."""
    info = workflow.info()
    try:
        req = await workflow.execute_activity_method(
            PeerActivities.cancel_request, CancelRequestQuery(workflow_id=info.workflow_id, run_id=info.run_id),
            summary="who requested the cancellation", **options.CONFIRM)
    except ActivityError as err:
        req = CancelRequest(found=False, reason=f"could not read who asked: {error_text(err)}")
    who = req.identity or (f"workflow {req.by_workflow}" if req.by_workflow else "")
    controls.audit(who or "unknown", "cancel", None, req.reason or "Request Cancellation (Web UI) or workflow cancel")
    named = (f"cancellation requested by {who}" if who else "cancellation requested by someone unnamed (the request "
             "carried no identity: the Web UI sends one only when it signs its users in)")
    return f"{named}: {req.reason}" if req.reason else named
