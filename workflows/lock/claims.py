"""Whose word the lock takes: a rollout's (or revert's) own account of its lock request, asked by an activity. The
lock confirms every `acquire` and `release` against it, and a fresh lock run recovers its holder and queue from the
claims of the service's running rollouts and reverts (its last run may have been terminated under them)."""

from __future__ import annotations

from pydantic import ValidationError
from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.lock import LockActivities
    from activities.peers import PeerActivities, PeerQuery
    from common.lock import LOCK_CLAIM_QUERY, LockClaim, LockState
    from workflows import options


async def claim_of(service: str, workflow_id: str) -> tuple[LockClaim | None, str]:
    """The rollout's own account of its request for `service`'s lock, or None and why there is none."""
    try:
        answer = await workflow.execute_activity_method(
            PeerActivities.query_workflow, PeerQuery(workflow_id=workflow_id, query=LOCK_CLAIM_QUERY),
            summary=f"confirm with {workflow_id}", **options.CONFIRM,
        )
    except ActivityError as err:
        return None, f"could not ask it ({err.cause or err})"
    if not answer.found:
        return None, "no such workflow"  # ended and gone, or never existed
    if answer.error is not None:
        return None, f"it is not a rollout waiting for a lock ({answer.error})"
    try:
        claim = LockClaim.model_validate(answer.answer)
    except ValidationError:
        return None, "its answer is not a lock claim"
    if claim.request.workflow_id != workflow_id or claim.request.service != service:
        return None, f"it claims a lock for {claim.request.service}, not this one"
    return claim, ""


async def recover(state: LockState, recovered: set[str]) -> bool:
    """Take back the holder and the queue from the claims of the service's running rollouts and reverts on this
    queue, each by its own word (a terminated lock run took its state with it); the queue keeps their order.
    `recovered` gets those queued here. False when the claims could not be read (the lock starts empty)."""
    try:
        found = await workflow.execute_activity_method(
            LockActivities.recover_claims, state.service,
            summary=f"who holds or waits for the {state.service} lock?", **options.CONFIRM,
        )
    except ActivityError as err:
        state.log.append(f"could not recover the claims of running rollouts ({err.cause or err}); starting empty")
        return False
    for req in found.holders:
        if state.holder is None:
            state.holder = req
            state.log.append(f"recovered holder {req.workflow_id} (its own claim: granted)")
        else:
            state.log.append(f"{req.workflow_id} also claims to hold the lock; {state.holder.workflow_id}, "
                             "started first, is recovered as the holder")
    for req in found.waiting:
        if all(q.workflow_id != req.workflow_id for q in state.queue):
            state.queue.append(req)
            recovered.add(req.workflow_id)
            state.log.append(f"recovered {req.workflow_id} waiting (its own claim: waiting)")
    for why in found.skipped:
        state.log.append(f"not recovered: {why}")
    return True
