"""RegionGuardWorkflow: watch a service's regions, move traffic away from a sick one, bring it back when it is well.

One per service (`guard/<service>`), long-running: every look (a read-only activity) judges each serving region
against the service's other regions (canary.guard) and plans, read-only, an evacuation of each (its readiness).
A region unhealthy for K looks is evacuated — by the existing EvacuationWorkflow, started as a child — when the
rules allow it (workflows/guard/rules.py), or proposed for a person to approve. An evacuated region healthy for
the hold-down is restored the same way (the restore's first step is a small probe share, health-checked, then
the rest in steps), or proposed. Every decision is notified (webhooks) with a link to this workflow.
It continues as new every `looks_per_run` looks, carrying its state.

This class is the shell: the loop, the handlers and the continue-as-new. Each question has its own file:
look.py (a look at every region), rules.py and decide.py (how the guard decides), actions.py (carrying a decision
out through a child traffic change), proposals.py (what a person approves or dismisses), records.py (decisions,
audit, notifications, publishing) and details.py (what the UI and the list show).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from common.types import INVALID_REQUEST
    from common.vocabulary import GUARD_TERMINAL
    from workflows import options
    from workflows.controls import Ack, Controls, Stopped, pause_updates, stop_update
    from workflows.guard.actions import Actions
    from workflows.guard.decide import decide
    from workflows.guard.details import readiness_view
    from workflows.guard.look import look
    from workflows.guard.models import ApproveGuard, DismissGuard, GuardInput, GuardState, StopGuard, guard_id
    from workflows.guard.proposals import Proposals
    from workflows.guard.records import GuardRecords
    from workflows.provenance import refuse_start, require_continued, require_id


def refuse_foreign_start(inp: GuardInput) -> None:
    """One guard per service, and its state only from its own previous run: refuse anything else at once.

    A second guard under another id would evacuate beside this one; a `state` typed into a start would make
    the guard restore regions it never evacuated (or forget those it did)."""
    what = f"region guard of {inp.service}"
    require_id(what, guard_id(inp.service))
    require_continued(what, "state", inp.state)
    if inp.state is not None and (inp.state.workflow_id, inp.state.service) != (guard_id(inp.service), inp.service):
        raise refuse_start(what, "state", f"it is the state of {inp.state.workflow_id} ({inp.state.service}), "
                           f"not of {guard_id(inp.service)}")


@workflow.defn(failure_exception_types=options.FAIL_ON_BUGS)
class RegionGuardWorkflow:
    """Watches one service's regions and evacuates or restores them by the rules it was given."""

    @workflow.init
    def __init__(self, inp: GuardInput) -> None:
        self.inp = inp
        self.state = inp.state or GuardState(workflow_id=workflow.info().workflow_id, service=inp.service,
                                             environment=inp.environment)
        self.controls: Controls[StopGuard] = Controls(self.state, noun=f"region guard of {inp.service}",
                                                      terminal=GUARD_TERMINAL)
        self.records = GuardRecords(inp, self.state, self.controls)
        self.proposals = Proposals(self.records)
        self.actions = Actions(self.records, self.proposals)

    # -- main loop ---------------------------------------------------------------------------------
    @workflow.run
    async def run(self, inp: GuardInput) -> GuardState:
        refuse_foreign_start(inp)
        rec = self.records
        problems = inp.problems()
        if problems:
            self.state.reason = "refused:\n" + "\n".join(f"  - {p}" for p in problems)
            rec.enter("failed")
            raise ApplicationError(f"region guard of {inp.service} {self.state.reason}", type=INVALID_REQUEST,
                                   non_retryable=True)
        if inp.state is None:
            rec.audit(inp.requested_by, "start", inp.reason or f"mode {inp.rules.mode}, restore {inp.rules.restore}")
            rec.notify("guard_started", f"watching {inp.service} ({inp.environment}); mode {inp.rules.mode}")
        looks = 0
        try:
            while True:
                await self.controls.wait_unpaused(f"look {self.state.look + 1}", self._publish)
                await look(rec)
                await decide(self.actions, self.proposals)
                looks += 1
                rec.outbox.prune()
                if looks >= inp.looks_per_run or workflow.info().is_continue_as_new_suggested() or options.build_changed():
                    await self._continue_as_new()
                rec.enter("watching", doing=f"the next look (every {inp.look_interval_seconds} s)")
                try:
                    await workflow.wait_condition(lambda: self.controls.stopping or bool(self.state.approvals),
                                                  timeout=timedelta(seconds=inp.look_interval_seconds),
                                                  timeout_summary="next look")
                except TimeoutError:
                    pass
                self.controls.raise_if_stopped()
                await self.actions.approved()
        except Stopped:
            stop = self.controls.stop
            why = f"stopped by {stop.by}: {stop.reason}" if stop else "stopped"
            self.state.reason = why + "; traffic stays where it is"
            rec.enter("stopped")
            rec.notify("guard_stopped", self.state.reason)
            await rec.outbox.flush()
            await workflow.wait_condition(workflow.all_handlers_finished)
            return self.state

    async def _continue_as_new(self) -> None:
        """Start the next run with this run's state, unless a person's word is still to be acted on here.

        A `stop` lives in the controls, not in the state a continue-as-new carries, and an approval is acted on
        in the run that accepted it: continuing as new with either pending dropped the acknowledged stop (the CI
        hang: the guard watched on, and its caller's `result()` with it). So a stop or an approval that arrived
        during the look, or while the notifications were finishing, is taken here first; the handlers are
        synchronous, so nothing can arrive between the last check and the continue-as-new."""
        await self.records.outbox.flush()
        await workflow.wait_condition(workflow.all_handlers_finished)
        if self.controls.stopping or self.state.approvals:
            return  # the wait below returns at once: the stop ends this run, the approval is carried out in it
        workflow.continue_as_new(self.inp.model_copy(update={"state": self.state.trimmed()}),
                                initial_versioning_behavior=options.upgrade_on_continue_as_new())

    def _publish(self) -> None:
        """Publish the state (the shared pause/resume/stop handlers call this)."""
        self.records.publish()

    # -- queries and updates -----------------------------------------------------------------------
    @workflow.query(description="Every region's verdict, streaks and readiness; proposals, decisions, audit trail.")
    def status(self) -> GuardState:
        return self.state

    @workflow.query(description="For each serving region: could the others absorb its traffic now (if not, why), "
                                "and its standing difference from its peers, if any.")
    def readiness(self) -> dict[str, dict[str, object]]:
        return readiness_view(self.state)

    @workflow.update(description='Carry out the guard\'s proposal for a region. JSON: {"region": "eu-west-1", "approver": "alice", "comment": "go"}.')
    def approve(self, req: ApproveGuard) -> Ack:
        return self.proposals.approve(req)

    @approve.validator
    def _validate_approve(self, req: ApproveGuard) -> None:
        self.proposals.check_approve(req)

    @workflow.update(description='Drop the guard\'s proposal for a region. JSON: {"region": "eu-west-1", "by": "alice", "reason": "why"}.')
    def dismiss(self, req: DismissGuard) -> Ack:
        return self.proposals.dismiss(req)

    @dismiss.validator
    def _validate_dismiss(self, req: DismissGuard) -> None:
        self.proposals.check_dismiss(req)

    pause, resume = pause_updates(
        holds_at="before the next look",
        pause='Hold before the next look (a running evacuation finishes). JSON: {"by": "alice", "reason": "why"}.',
        resume='Look again. JSON: {"by": "alice"}.')

    def _stop(self, req: StopGuard) -> str:
        self.controls.halt(req)
        self.records.audit(req.by, "stop", req.reason)
        return "stopping after the running look or traffic change; traffic stays where it is"

    stop = stop_update(StopGuard, _stop, name="stop",
                       description='Stop watching; traffic stays where it is. JSON: {"by": "alice", "reason": "why"}.')
