"""RolloutWorkflow: runs a plan wave by wave, each stage a child StageWorkflow, and rolls back on failure.

Stages that finish their work stay open until the rollout's verdict, so a rollback by scope runs on each
stage's own page. A rollout that does not reach its goal ends as a Temporal failure whose type names the
outcome (RolledBack, Failed) and whose details are its full state; one that succeeds returns that state; an
aborted or rejected one ends Canceled, its state in the `bifrost_outcome` memo (workflows/controls/ending.py). Release
managers drive it through validated updates (approve, reject, pause, resume, abort, rollback, skip_soak,
override_window, resolve_hold) and read it through the `summary` and `status` queries and the UI's current details.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows import options
    from workflows.controls import Stopped
    from workflows.controls.ending import CANCEL_REASON
    from workflows.controls.lock_client import LockHolder, ServiceLock
    from workflows.plan import Plan
    from workflows.provenance import require_own_id
    from workflows.request import RolloutRequest
    from workflows.rollout.conclude import Conclusion
    from workflows.rollout.context import Rollout
    from workflows.rollout.details import rollout_summary
    from workflows.rollout.gates import Gates
    from workflows.rollout.holds import Holds
    from workflows.rollout.models import RolloutState, RolloutSummary, Stop
    from workflows.rollout.progress import Progress
    from workflows.rollout.stages import Stages
    from workflows.rollout.start import Start
    from workflows.rollout.updates import (
        Abort,
        Ack,
        Approve,
        OverrideWindow,
        Pause,
        Reject,
        ResolveHold,
        Resume,
        Rollback,
        SkipSoak,
    )
    from workflows.rollout.waits import Waits
    from workflows.stage.context import PROGRESS_SIGNAL
    from workflows.stage.models import StageOrders, StageState
    from workflows.stage.orders import STAGE_ORDERS_QUERY


@workflow.defn(failure_exception_types=options.FAIL_ON_BUGS)
class RolloutWorkflow(LockHolder):
    """One rollout of one service version across all planned stages: the run's order of things, and the handlers
    that check a message and hand it to the part of the rollout it concerns. The service lock's signals and claim
    query are LockHolder's (workflows/controls/lock_client.py)."""

    @workflow.init
    def __init__(self, request: RolloutRequest) -> None:
        info = workflow.info()
        self.state = RolloutState(rollout_id=info.workflow_id, service=request.service, version=request.version)
        self.rollout = r = Rollout(request, self.state)
        self.controls = r.controls
        self.lock = ServiceLock(info.workflow_id, request.service, request.version, request.on_conflict)
        self.start = Start(r, self.lock, answered=self._lock_answered)  # the plan, the lock, the versions before
        self.holds = Holds(r)  # stages held on failure
        self.gates = Gates(r)  # approvals before a wave
        self.waits = Waits(r, self.gates, self.holds)  # pause, gates, windows, traffic before a wave
        self.stages = Stages(r, self.holds)  # the stage workflows
        self.progress = Progress(r, self.holds)  # what the stages say of themselves
        self.conclusion = Conclusion(r, self.stages)  # the verdict and the run's end

    # -- main flow ---------------------------------------------------------------------------------
    @workflow.run
    async def run(self, request: RolloutRequest) -> RolloutState:
        require_own_id(workflow.info().workflow_id, request.workflow_id, what=f"a rollout of {request.service} {request.version}",
                       suffixed=True)
        plan = await self.start.plan(request)
        try:
            await self._execute(plan)
        except Stopped:
            pass
        except workflow.NondeterminismError:
            raise  # a worker with the right code can still resume this run
        except asyncio.CancelledError:
            self.rollout.halt(Stop("aborted", CANCEL_REASON))
        except Exception as err:  # a bug must not wedge the rollout or hold the service's lock
            workflow.logger.exception("rollout failed unexpectedly")
            self.rollout.halt(Stop("failed", f"Bifrost internal error ({type(err).__name__}: {err}); "
                                             "stages were stopped and rolled back by scope"))
        try:
            await self.conclusion.conclude()
        except Exception:  # not `finally`: a workflow evicted from the worker's cache must not signal anything
            await self.lock.release()
            raise
        await self.lock.release()
        return await self.conclusion.close()

    async def _execute(self, plan: Plan) -> None:
        """The service's lock, the versions before, then wave after wave until the last, a failure or a stop."""
        await self.start.queue(plan)
        await self.start.inventory(plan)
        for wave in plan.waves:
            self.state.current_wave = wave.index
            self.state.current_stages = [s.key for s in wave.stages]  # what a gate or window holds back
            await self.waits.before_wave(wave)
            await self.stages.run_wave(wave)
            if self.state.failed_stage is not None or self.rollout.controls.stopping:
                return

    # -- what the lock and the stages say (each confirmed with its supposed sender) -------------------
    def _publish(self) -> None:
        self.rollout.publish()

    def _refused_by_lock(self, reason: str) -> None:
        self.rollout.halt(Stop("rejected", f"not started: {reason} (on_conflict: reject)"))

    def _superseded_by(self, version: str) -> None:
        self.rollout.halt(Stop("aborted", f"superseded by {self.rollout.req.service} {version}"))

    @workflow.signal(name=PROGRESS_SIGNAL, description="Internal: a stage says its status changed; the rollout takes "
                                                        "the stage's own answer to its progress query, not the report.")
    async def stage_progress(self, report: StageState) -> None:
        await self.progress.reported(report)

    # -- queries -----------------------------------------------------------------------------------
    @workflow.query(description="At a glance: status, wave, each stage's status and version, what the rollout waits for.")
    def summary(self) -> RolloutSummary:
        return rollout_summary(self.state)

    @workflow.query(description="Everything: per-stage state and versions, verdicts and report links, approvals, pause, audit trail.")
    def status(self) -> RolloutState:
        return self.state

    @workflow.query(name=STAGE_ORDERS_QUERY, description="Internal: what the rollout told its stages (hold, stop, skip a "
                                                         "soak, keep or roll back); a stage obeys a signal only as far as this says.")
    def stage_orders(self) -> StageOrders:
        return self.rollout.orders.model_copy(update={"hold": self.holds.stages_hold()})

    # -- updates: each validator checks, each handler delegates --------------------------------------
    @workflow.update(description='Approve the pending gate. JSON: {"wave": 4, "approver": "alice", "comment": "ok"} '
                                 '(or "stage": "eu-west-1/prod", any stage of the waiting wave).')
    def approve(self, req: Approve) -> Ack:
        return self.gates.approve(req)

    @approve.validator
    def _validate_approve(self, req: Approve) -> None:
        self.gates.check(req)

    @workflow.update(description='Reject the pending gate and roll back by the rollback scope. JSON: {"wave": 4, "approver": "alice", "reason": "why"}.')
    def reject(self, req: Reject) -> Ack:
        return self.gates.reject(req)

    @reject.validator
    def _validate_reject(self, req: Reject) -> None:
        self.gates.check(req)

    @workflow.update(description='Hold the rollout at the next safe point (before a wave, before promotion); soaks keep their clock. JSON: {"by": "alice", "reason": "why"}.')
    def pause(self, req: Pause) -> Ack:
        return self.waits.pause(req)

    @pause.validator
    def _validate_pause(self, req: Pause) -> None:
        self.rollout.controls.validate_pause()

    @workflow.update(description='Continue a paused rollout. JSON: {"by": "alice"}.')
    def resume(self, req: Resume) -> Ack:
        return self.waits.resume(req)

    @resume.validator
    def _validate_resume(self, req: Resume) -> None:
        self.rollout.controls.validate_resume()

    @workflow.update(description='Stop the rollout and roll back by the request\'s rollback scope. JSON: {"by": "alice", "reason": "why"}.')
    def abort(self, req: Abort) -> Ack:
        return self.conclusion.abort(req)

    @abort.validator
    def _validate_abort(self, req: Abort) -> None:
        self.rollout.controls.check_running()

    @workflow.update(description='Stop and roll back with an explicit scope ("stage", "region" or "all"). JSON: {"by": "alice", "reason": "why", "scope": "all"}.')
    def rollback(self, req: Rollback) -> Ack:
        return self.conclusion.roll_back(req)

    @rollback.validator
    def _validate_rollback(self, req: Rollback) -> None:
        self.rollout.controls.check_running()

    @workflow.update(description='End the soak of a soaking stage now. JSON: {"stage": "us-east-1/prod", "by": "alice", "reason": "why"}.')
    def skip_soak(self, req: SkipSoak) -> Ack:
        return self.stages.skip_soak(req)

    @skip_soak.validator
    def _validate_skip_soak(self, req: SkipSoak) -> None:
        self.stages.check_skip(req)

    @workflow.update(description='Start a stage outside its deployment window. JSON: {"stage": "eu-west-1/prod", "by": "alice", "reason": "why"}.')
    def override_window(self, req: OverrideWindow) -> Ack:
        return self.waits.override_window(req)

    @override_window.validator
    def _validate_override_window(self, req: OverrideWindow) -> None:
        self.waits.check_override(req)

    @workflow.update(description='Decide on a stage held on failure (on_failure: hold): "retry" judges it again on a '
                                 'fresh window, "promote" promotes it, "rollback" rolls it back and the rollout by its '
                                 'scope. JSON: {"stage": "eu-west-1/prod", "action": "promote", "by": "alice", '
                                 '"reason": "why (required for promote and rollback)"}.')
    def resolve_hold(self, req: ResolveHold) -> Ack:
        return self.holds.decide(req)

    @resolve_hold.validator
    def _validate_resolve_hold(self, req: ResolveHold) -> None:
        self.holds.check_decision(req)
