"""One rollout per service: the lock workflow. Its client (`ServiceLock`, and the handlers of the lock's answers) is
workflows/controls/lock_client.py; whose word it takes (claims, recovery) is claims.py; its models are models.py.

Rollouts reach the lock with signal-with-start (an activity, atomic, so racing submissions are ordered by the
server); the lock answers each rollout with a signal: granted, refused, or superseded.

Anyone may send these signals by hand, so neither side acts on a signal's word: the lock admits an `acquire`
and accepts a `release` only once the rollout named confirms it (its `lock_claim` query), and a rollout takes
a grant, a refusal or a supersession only once the lock's own state (its `lock_state` query) says so. A
signal that does not fit is ignored and leaves one line in the lock's log or the rollout's audit trail.
A signal is only a poke: a rollout waiting for the lock also re-checks the lock's state every LOCK_RECHECK, so a
grant, refusal or supersession whose signal was lost, or could not be confirmed, still reaches it.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.lock import LockActivities
    from common.lock import ACQUIRE_SIGNAL, LOCK_STATE_QUERY, LOCK_WORKFLOW, LockRequest, LockState
    from common.types import INVALID_PAYLOAD
    from workflows import options
    from workflows.controls.crossing import signal_across
    from workflows.controls.lock_client import GRANTED_SIGNAL, REFUSED_SIGNAL, RELEASE_SIGNAL, SUPERSEDED_SIGNAL
    from workflows.lock.claims import claim_of, recover
    from workflows.lock.models import remember
    from workflows.parentage import lock_refusal

IDLE_BEFORE_EXIT = timedelta(minutes=5)


@workflow.defn(name=LOCK_WORKFLOW, failure_exception_types=options.FAIL_ON_BUGS)
class ServiceLockWorkflow:
    """Grants the lock in arrival order; exits after a quiet period with nobody waiting."""

    @workflow.init
    def __init__(self, state: LockState) -> None:
        # a lock started by hand under another id, or with a holder, queue or record it did not write, fails at once;
        # until then (and for queries on the failed run) it shows an empty lock, never the forged state
        self.refusal = lock_refusal(state, workflow.info())
        self.state = state if self.refusal is None else LockState(service=state.service)
        self.outbox: list[tuple[str, str, str]] = []  # (workflow_id, signal, argument)
        self.check_holder_now = False  # someone is waiting: make sure the holder is still alive
        self.confirming = asyncio.Lock()  # confirm one signal at a time, in arrival order
        # a fresh run (not its own continue-as-new) first recovers the claims of rollouts that already hold or wait for
        # the lock (its last run may have been terminated under them); until then it admits and frees nobody
        self.recovering = self.refusal is None and workflow.info().continued_run_id is None
        self.recovered: set[str] = set()  # queued by recovery: an acquire of theirs that reaches this run is admitted anew

    @workflow.run
    async def run(self, state: LockState) -> None:
        if self.refusal is not None:
            raise ApplicationError(self.refusal, type=INVALID_PAYLOAD, non_retryable=True)
        if self.recovering:
            if await recover(self.state, self.recovered):
                self._grant_next()  # waiting rollouts whose holder has ended
            self.recovering = False
        while True:
            await self._flush()
            if self.state.holder is None and not self.state.queue:
                try:
                    await workflow.wait_condition(lambda: bool(self.outbox) or self.state.holder is not None,
                                                  timeout=IDLE_BEFORE_EXIT, timeout_summary="idle: no rollout waiting")
                except TimeoutError:
                    await workflow.wait_condition(workflow.all_handlers_finished)
                    if not self.outbox and self.state.holder is None and not self.state.queue:
                        return
                continue
            try:
                await workflow.wait_condition(lambda: bool(self.outbox) or self.check_holder_now,
                                              timeout=timedelta(seconds=self.state.holder_check_seconds),
                                              timeout_summary="check that the holder is still running")
            except TimeoutError:
                self.check_holder_now = True
            if self.check_holder_now:
                self.check_holder_now = False
                await self._check_holder()
            # a long history, or a new build made current: the next run starts on the current build (the queue with it)
            if workflow.info().is_continue_as_new_suggested() or options.build_changed():
                await self._flush()
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(self.state, initial_versioning_behavior=options.upgrade_on_continue_as_new())

    async def _check_holder(self) -> None:
        """A rollout that was terminated never releases the lock: free it so the queue moves on."""
        holder = self.state.holder
        if holder is None:
            return
        running = await workflow.execute_activity_method(
            LockActivities.rollout_is_running, holder.workflow_id,
            summary=f"is {holder.workflow_id} still running?", **options.QUICK,
        )
        if not running and self.state.holder is holder:
            self.state.log.append(f"{holder.workflow_id} ended without releasing; lock freed")
            self._free(holder.workflow_id)

    async def _flush(self) -> None:
        while self.outbox:
            target, signal, arg = self.outbox.pop(0)
            # the holders run in the namespace people open: an activity signals them there
            await signal_across(target, signal, arg, to="home", summary=f"{signal} to {target}")

    def _grant_next(self) -> None:
        if self.state.holder is None and self.state.queue:
            self.state.holder = self.state.queue.pop(0)
            self.state.log.append(f"granted {self.state.holder.workflow_id}")
            self.outbox.append((self.state.holder.workflow_id, GRANTED_SIGNAL, self.state.service))

    @workflow.signal(name=ACQUIRE_SIGNAL, description="Internal: a rollout asks for the service lock "
                                                       "(admitted once that rollout confirms it waits for it).")
    async def acquire(self, req: LockRequest) -> None:
        await workflow.wait_condition(lambda: not self.recovering)
        async with self.confirming:
            claim, why = await claim_of(self.state.service, req.workflow_id)
            if claim is not None and claim.status != "waiting":
                why = f"{req.workflow_id} is not waiting for the lock (its request is {claim.status})"
            elif claim is not None and claim.request != req:
                why = f"{req.workflow_id} asked for {claim.request.service} {claim.request.version} " \
                      f"({claim.request.policy}), not {req.service} {req.version} ({req.policy})"
            if claim is None or why:
                self.state.log.append(f"ignored acquire from {req.workflow_id}: {why}")
                return
            if req.workflow_id in self.recovered:  # a request racing this run's start: its policy applies after all
                self.recovered.discard(req.workflow_id)
                if req.policy == "queue":
                    return  # it keeps its recovered place
                self.state.queue = [q for q in self.state.queue if q.workflow_id != req.workflow_id]
            self._admit(req)

    def _admit(self, req: LockRequest) -> None:
        """Queue, refuse or supersede by the request's policy (the request is confirmed)."""
        holder = self.state.holder
        # a holder that asks again and confirms it waits (a rollout reset to before it got the lock) is granted again
        if holder is not None and holder.workflow_id == req.workflow_id and holder == req:
            self.state.log.append(f"granted {req.workflow_id} again: it holds the lock and asks for it (a reset run)")
            self.outbox.append((req.workflow_id, GRANTED_SIGNAL, self.state.service))
            return
        known = [self.state.holder, *self.state.queue]
        if any(k is not None and k.workflow_id == req.workflow_id for k in known):
            return  # a retried request: already holding or waiting
        holder = self.state.holder
        if holder is None and not self.state.queue:
            self.state.queue.append(req)
            self._grant_next()
            return
        busy = holder.workflow_id if holder else self.state.queue[0].workflow_id
        if req.policy == "reject":
            self.state.log.append(f"refused {req.workflow_id}: {busy} is active")
            reason = f"{busy} is already rolling out {self.state.service}"
            remember(self.state.refused, req.workflow_id, reason)
            self.outbox.append((req.workflow_id, REFUSED_SIGNAL, reason))
        elif req.policy == "supersede":
            for waiting in self.state.queue:
                remember(self.state.superseded, waiting.workflow_id, req.version)
                self.outbox.append((waiting.workflow_id, SUPERSEDED_SIGNAL, req.version))
            self.state.queue = [req]
            if holder is not None:
                self.state.log.append(f"{req.workflow_id} supersedes {holder.workflow_id}")
                remember(self.state.superseded, holder.workflow_id, req.version)
                self.outbox.append((holder.workflow_id, SUPERSEDED_SIGNAL, req.version))
            self._grant_next()
        else:
            self.state.queue.append(req)
            self.state.log.append(f"queued {req.workflow_id} behind {busy}")
            self.check_holder_now = True  # a holder that ended without releasing must not keep anyone waiting

    @workflow.signal(name=RELEASE_SIGNAL, description="Internal: a rollout has finished and gives the lock back "
                                                       "(accepted once that rollout confirms it).")
    async def release(self, workflow_id: str) -> None:
        await workflow.wait_condition(lambda: not self.recovering)
        async with self.confirming:
            holds = self.state.holder is not None and self.state.holder.workflow_id == workflow_id
            if not holds and all(q.workflow_id != workflow_id for q in self.state.queue):
                self.state.log.append(f"release from {workflow_id}: it neither holds nor waits for the lock; nothing to do")
                return
            claim, why = await claim_of(self.state.service, workflow_id)
            if claim is not None and claim.status in ("waiting", "granted"):
                why = f"{workflow_id} still {'holds' if claim.status == 'granted' else 'waits for'} the lock"
            elif claim is None and why and "no such workflow" not in why:
                why = f"{why}; the holder check frees the lock once {workflow_id} has ended"
            else:
                why = ""
            if why:
                self.state.log.append(f"ignored release of {workflow_id}: {why}")
                return
            self._free(workflow_id)

    def _free(self, workflow_id: str) -> None:
        """The holder gave the lock back (or ended): grant the next; a waiting rollout leaves the queue."""
        if self.state.holder is not None and self.state.holder.workflow_id == workflow_id:
            self.state.log.append(f"released by {workflow_id}")
            self.state.holder = None
            self._grant_next()
        else:
            self.state.queue = [q for q in self.state.queue if q.workflow_id != workflow_id]

    @workflow.query(name=LOCK_STATE_QUERY, description="Who holds the service lock, who waits, whom it refused or superseded.")
    def lock_state(self) -> LockState:
        return self.state
