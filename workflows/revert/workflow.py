"""RevertWorkflow: undo a finished release — every region it changed back to an earlier version, in reverse wave order.

No canary and no soak: the version going back was in production before. Each region is deployed (the deployer's
rollback to a version), then its primary is judged against its own window from just before the revert (the soak
monitor's look, through the traffic health check), so its time is the deploys plus the health checks. With
`evacuate`, a production region's traffic moves to the other regions first (EvacuationWorkflow) and back after the
deploy. A health alarm, a deploy error or a traffic move that fails stops the revert before the next region, and
the reason says which regions still run the release's version.

It takes the service lock as a rollout does (workflows/lock/): while a rollout of the service runs it is refused,
naming that rollout (on_conflict `reject`, the default), or waits for it to end (`queue`). The release to undo is
read once the lock is ours, from the server's records (activities/releases.py), never from the input; the input
is checked against it — an unknown service, a version the service never ran before the release, stages the release
does not have — and refused before anything is deployed. Pause, resume and abort are the shared controls'
(workflows/controls/); an abort stops before the next region (regions already reverted stay reverted), and the
revert ends Canceled with its final state in the `bifrost_outcome` memo, as an aborted rollout does (workflows/controls/ending.py,
patch aborted-revert-ends-canceled); any other stop ends Failed with the state as the failure's details.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from common import notices
    from common.failures import INVALID_REQUEST, OUTCOME_FAILURE_TYPES
    from common.vocabulary import REVERT_TERMINAL
    from workflows import options
    from workflows.controls import Controls, Outbox, Stopped, pause_updates, stop_update
    from workflows.controls.ending import CANCEL_REASON, end_canceled, name_canceller
    from workflows.controls.lock_client import LockHolder, ServiceLock
    from workflows.provenance import require_own_id
    from workflows.request import RolloutRequest
    from workflows.revert.details import view
    from workflows.revert.find import NotRevertible, find_release, read_versions, take
    from workflows.revert.models import RevertInput, RevertState, RevertStop, starting_state
    from workflows.revert.regions import Regions
    from workflows.rollout.updates import Abort

FAILURE_TYPES = {**OUTCOME_FAILURE_TYPES, "invalid": INVALID_REQUEST}
# A queued revert tells people which rollout it waits behind (a timer, a lock query and a notify activity).
QUEUED_NOTICE_AFTER = timedelta(seconds=10)  # as a rollout's: a lock not granted by then is held by a running rollout


@workflow.defn(failure_exception_types=options.FAIL_ON_BUGS)
class RevertWorkflow(LockHolder):
    """Put one service back on an earlier version everywhere a finished release changed it."""

    @workflow.init
    def __init__(self, inp: RevertInput) -> None:
        self.inp = inp
        info = workflow.info()
        self.state = starting_state(inp, info.workflow_id)
        self.controls: Controls[RevertStop] = Controls(
            self.state, noun="revert", terminal=REVERT_TERMINAL, stop_word=lambda stop: stop.status,
            on_cancel=self._cancel_requested)
        self.lock = ServiceLock(info.workflow_id, inp.service, inp.to_version, inp.on_conflict)
        self.release: RolloutRequest | None = None
        self.outbox = Outbox()
        self._queued_notice: asyncio.Future[Any] | None = None  # a notice sent if the lock is not granted soon

    def _cancel_requested(self) -> None:
        self.controls.halt(RevertStop("aborted", CANCEL_REASON))

    # -- main flow ---------------------------------------------------------------------------------
    @workflow.run
    async def run(self, inp: RevertInput) -> RevertState:
        require_own_id(workflow.info().workflow_id, inp.workflow_id, what=f"a revert of {inp.service} to {inp.to_version}")
        self.state.started_at = workflow.now()
        self.controls.audit(inp.requested_by, "revert", None, f"{inp.service} to {inp.to_version}: {inp.reason}")
        self.controls.enter("planning", doing="finding the release to undo")
        self._publish()
        try:
            await self._revert()
        except Stopped:
            pass
        except NotRevertible as bad:
            self.controls.halt(RevertStop("invalid", f"refused, nothing was deployed: {bad}"))
        except asyncio.CancelledError:
            self.controls.halt(RevertStop("aborted", CANCEL_REASON))
        except workflow.NondeterminismError:
            raise  # a worker with the right code can still resume this run
        except Exception as err:  # a bug must not wedge the revert or hold the service's lock
            workflow.logger.exception("revert failed unexpectedly")
            self.controls.halt(RevertStop("failed", f"Bifrost internal error ({type(err).__name__}: {err})"))
        await self.lock.release()
        return await self._end()

    async def _revert(self) -> None:
        # refuse a bad input at once, even when it would queue
        self.release = take(await find_release(self.inp, self.controls, settled=False), self.inp, self.state)
        self.controls.hold("lock", releases=f"the {self.inp.service} lock (a rollout of {self.inp.service} may be running)")
        self._publish()
        if self.inp.on_conflict == "queue":
            self._queued_notice = asyncio.ensure_future(self._notice_if_queued())
        acquired = await self.lock.acquire(give_up=lambda: self.controls.stopping, answered=self._lock_answered)
        self.controls.release("lock")
        if not acquired:
            raise Stopped()
        before = self.state.release
        # under the lock: the release cannot change any more
        self.release = take(await find_release(self.inp, self.controls, settled=True), self.inp, self.state)
        if self.state.release != before:
            self.controls.audit("bifrost", "release", self.state.release, f"{before} was the latest when the revert "
                                "was asked for; the rollout it waited for ended since, and is the one undone")
        self.controls.enter("reverting", doing="reading every region's version")
        self._publish()
        self._tell(notices.REVERT_STARTED, f"reverting {len(self.state.regions)} stages of {self.state.release} "
                   f"({self.state.release_version}) to {self.inp.to_version}: {self.inp.reason}")
        await read_versions(self.inp, self.state, self.controls)
        await Regions(self.inp, self.release, self.state, self.controls, self._publish).revert_all()

    # -- the end -----------------------------------------------------------------------------------
    async def _end(self) -> RevertState:
        stop = self.controls.stop
        if stop is not None and stop.reason == CANCEL_REASON:
            # who sent the request, in the reason and the audit trail
            stop = self.controls.stop = RevertStop("aborted", await name_canceller(self.controls))
        status, reason = (stop.status, stop.reason) if stop is not None else (
            "reverted", f"{self.inp.service} is back on {self.inp.to_version} in every stage of {self.state.release}")
        self.state.reason, self.state.ended_at, self.state.current = reason, workflow.now(), []
        self.controls.audit("bifrost", status, None, reason)
        self.controls.enter(status)
        self._publish()
        if status == "reverted":
            self._tell(notices.REVERT_FINISHED, reason)
        elif status in ("failed", "aborted") and any(r.status != "pending" for r in self.state.regions):
            self._tell(notices.REVERT_FAILED, f"{status}: {reason}")
        if self._queued_notice is not None:  # it ends once the lock is not waited for
            await asyncio.gather(self._queued_notice, return_exceptions=True)
        await self.outbox.flush()
        await workflow.wait_condition(workflow.all_handlers_finished)
        if status == "aborted":
            await end_canceled(self.state, "revert")  # Canceled, its state in the memo (returns if it cannot)
        if status != "reverted":
            raise ApplicationError(f"revert {status}: {reason}", self.state, type=FAILURE_TYPES[status], non_retryable=True)
        return self.state

    # -- telling people and publishing ---------------------------------------------------------------
    def _tell(self, event: str, text: str) -> None:
        """Tell people (chat webhooks) without waiting: a notice never delays or fails the revert."""
        self.outbox.send(notices.revert(revert_id=self.state.revert_id, service=self.inp.service,
                                        version=self.inp.to_version, event=event, text=text,
                                        stages=[r.key for r in self.state.regions]))

    def _waiting_for_lock(self) -> bool:
        return self.controls.held("lock") is not None and not self.controls.stopping

    async def _notice_if_queued(self) -> None:
        """Tell people the revert waits behind a running rollout (named by the lock), if the lock is not granted soon."""
        try:
            await workflow.wait_condition(lambda: not self._waiting_for_lock(), timeout=QUEUED_NOTICE_AFTER,
                                          timeout_summary="notice if still queued")
            return
        except TimeoutError:
            pass
        ahead = await self.lock.holder()
        if not self._waiting_for_lock():  # granted (or stopped) while the lock was asked
            return
        behind = ahead or f"a running {self.inp.service} rollout"
        self.controls.hold("lock", releases=f"the {self.inp.service} lock, held by {behind}")
        self.controls.audit("bifrost", "queued", None, f"behind {behind}; starts when it ends")
        self._publish()
        self.outbox.send(notices.revert_queued(revert_id=self.state.revert_id, service=self.inp.service,
                                               version=self.inp.to_version, waits_for=ahead))

    def _publish(self) -> None:
        self.controls.publish(*view(self.state))

    # -- the lock (its signal handlers and claim query: LockHolder) -------------------------------
    def _refused_by_lock(self, reason: str) -> None:
        self.controls.halt(RevertStop("rejected", f"not started, nothing was deployed: {reason}; revert once it has "
                                                  "ended, or ask again with --queue to wait for it"))

    def _superseded_by(self, version: str) -> None:
        self.controls.halt(RevertStop("aborted", f"superseded by a rollout of {self.inp.service} {version} "
                                                 "(on_conflict: supersede); stopped before the next region"))

    # -- queries and updates ----------------------------------------------------------------------
    @workflow.query(description="Everything: the release undone, each region's versions, health and traffic, the audit trail.")
    def status(self) -> RevertState:
        return self.state

    pause, resume = pause_updates(
        holds_at="before the next wave",
        pause='Hold before the next wave (the region in progress finishes). JSON: {"by": "alice", "reason": "why"}.',
        resume='Continue a paused revert. JSON: {"by": "alice"}.')

    def _abort(self, req: Abort) -> str:
        self.controls.audit(req.by, "abort", None, req.reason)
        self.controls.halt(RevertStop("aborted", f"aborted by {req.by}: {req.reason}"))
        return "aborting: stops before the next region"

    abort = stop_update(Abort, _abort, description='Stop before the next region; regions already reverted stay '
                        'reverted. JSON: {"by": "alice", "reason": "why"}.')
