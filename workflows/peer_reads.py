"""Asking another workflow's own state (a query run by `PeerActivities.query_workflow`), from workflow code.

A local activity costs no server dispatch and wakes no workflow task of its own, but it keeps the asking workflow's
task open while it runs, and a query to that workflow waits for the open task. So `ask` runs the query locally only
where the caller says it cannot close a wait cycle (workflows/options.py, CONFIRM), and for a short while: if the
local attempt fails (the other workflow slow or not answering), it asks again by an ordinary activity, which retries
for as long as a confirmation may take without holding the caller's task open."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import CancelledError, FailureError

with workflow.unsafe.imports_passed_through():
    from activities.peers import PeerActivities, PeerAnswer, PeerQuery
    from workflows import options

In = TypeVar("In")
Out = TypeVar("Out")


def local_failed(err: FailureError) -> bool:
    """Whether a local activity's error is its failure (to be asked again by an ordinary activity), not a cancellation.

    A failed local activity reaches workflow code as the activity's own error (an ApplicationError, a TimeoutError),
    not wrapped in an ActivityError as an ordinary activity's is (temporalio 1.35)."""
    return not isinstance(err, CancelledError)


async def local_first(fn: Callable[[Any, In], Awaitable[Out]], arg: In, summary: str, *, local: bool,
                      ordinary: options.ActivityOptions) -> Out:
    """Run activity method `fn`: first as a local activity if `local` (LOCAL_READ), then (or else) as an ordinary one
    with `ordinary`. Raises ActivityError only if the ordinary activity fails too."""
    if local:
        try:
            return await workflow.execute_local_activity_method(fn, arg, summary=summary, **options.LOCAL_READ)
        except FailureError as err:
            if not local_failed(err):
                raise
            # slow or failing: the ordinary activity below keeps trying without holding this task open
    return await workflow.execute_activity_method(fn, arg, summary=summary, **ordinary)


async def ask(query: PeerQuery, summary: str, *, local: bool,
              ordinary: options.ActivityOptions = options.CONFIRM) -> PeerAnswer:
    """`query`'s answer (the other workflow's own), locally first if `local` (see `local_first`)."""
    return await local_first(PeerActivities.query_workflow, query, summary, local=local, ordinary=ordinary)
