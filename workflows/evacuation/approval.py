"""Where an evacuation waits for approval: before anything changes, when the input asks for it; `approve` (by
one of the approvers, checked by the shared Approval of workflows/controls) lets it go on, a stop or the timeout
ends it."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.controls import refused
    from workflows.evacuation.models import AbortShift, ApproveShift
    from workflows.evacuation.progress import Progress


async def await_approval(run: Progress) -> None:
    """Hold on `approval` until approved, stopped, or timed out (a timeout stops it); raises Stopped if stopped."""
    if not run.inp.require_approval:
        return
    timeout = timedelta(minutes=run.inp.approval_timeout_minutes)
    run.approval.hold("approval", releases="approve before anything changes", until=workflow.now() + timeout,
                      then="it is aborted with nothing changed")
    run.publish()
    try:
        await workflow.wait_condition(
            lambda: run.approved is not None or run.controls.stopping,
            timeout=timeout, timeout_summary="approval timeout",
        )
    except TimeoutError:
        abort = AbortShift(by="bifrost", reason=f"no approval within {run.inp.approval_timeout_minutes:g} min")
        run.controls.halt(abort)
        run.audit("bifrost", "approval-timeout", abort.reason)
    run.controls.release("approval")
    run.controls.raise_if_stopped()


def check_approval(run: Progress, req: ApproveShift) -> None:
    """The `approve` update's validator: only while waiting for approval, and only by an approver."""
    run.controls.check_running()
    if run.controls.held("approval") is None or run.approved is not None:
        raise refused(f"not waiting for approval (status: {run.state.status}"
                      f"{'' if run.inp.require_approval else '; this evacuation did not ask for one'})")
    run.approval.check_who(req.approver)


def take_approval(run: Progress, req: ApproveShift) -> None:
    """The `approve` update: note who approved (the hold is released where the approval is awaited)."""
    run.approved = req
    run.approval.decided(req.approver, "approve", None, req.comment)
