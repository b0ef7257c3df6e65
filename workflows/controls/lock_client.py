"""The service lock's client for the rollout and the revert: `ServiceLock` asks, waits and gives back; `LockHolder` holds
the lock's three signal handlers and the claim query. An answer counts only once the lock's own state says so (anyone may
send those signals); a waiting run re-checks that state every LOCK_RECHECK. The lock runs in the machinery namespace."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, Literal

from pydantic import ValidationError
from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.lock import LockActivities
    from activities.peers import PeerActivities, PeerQuery
    from common.lock import LOCK_CLAIM_QUERY, LOCK_STATE_QUERY, LOCK_WORKFLOW, LockClaim, LockRequest, LockState, lock_id
    from common.lock import standing as standing
    from common.namespaces import machinery_namespace
    from common.types import ConcurrencyPolicy
    from workflows import options
    from workflows.controls import Controls
    from workflows.controls.crossing import signal_across

# What the lock answers (LockHolder's handlers carry these names), and the signal that gives the lock back.
GRANTED_SIGNAL = "lock_granted"
REFUSED_SIGNAL = "lock_refused"
SUPERSEDED_SIGNAL = "superseded"
RELEASE_SIGNAL = "release"
LOCK_RECHECK = timedelta(minutes=3)  # a grant normally arrives as a signal within a second; this heals a lost one
LOCK_CLOSED = "the lock no longer runs"  # what a re-check found of a lock terminated under its waiting rollouts
FOUND = "found by re-checking the lock; its signal never arrived or could not be confirmed"

# What a re-check found in the lock's state about this rollout: taken, refused (reason) or superseded (version).
LockAnswer = tuple[Literal["granted", "refused", "superseded"], str]
LockStatus = Literal["none", "waiting", "granted", "refused", "released"]  # where a rollout stands with the lock


class ServiceLock:
    """A rollout's (or revert's) side of the lock protocol: ask, wait for the answer, give it back. LockHolder's
    handlers call the `confirm_*` methods, which act only on what the lock's own state says."""

    def __init__(self, rollout_id: str, service: str, version: str, policy: ConcurrencyPolicy) -> None:
        self.request = LockRequest(workflow_id=rollout_id, service=service, version=version, policy=policy)
        self.status: LockStatus = "none"

    @property
    def _locks(self) -> str:  # the lock runs in the machinery namespace of this run's
        return machinery_namespace(workflow.info().namespace)

    def claim(self) -> LockClaim:
        """This rollout's own account of its request: what the lock confirms an acquire or a release against."""
        return LockClaim(request=self.request, status=self.status)

    async def acquire(self, give_up: Callable[[], bool], answered: Callable[[LockAnswer], None]) -> bool:
        """Ask for the lock and wait for the answer (or until `give_up()`); True when it is ours. Every LOCK_RECHECK
        it asks the lock's own state, and `answered` hears of an answer found that way (its signal lost or unconfirmed)."""
        await self._request()
        while True:
            try:
                await workflow.wait_condition(lambda: self.status != "waiting" or give_up(),
                                              timeout=LOCK_RECHECK, timeout_summary="re-check the lock's own state")
                break
            except TimeoutError:
                answer = await self._recheck()
                if answer is not None:
                    answered(answer)
        return self.status == "granted"

    async def _request(self) -> None:
        self.status = "waiting"
        await workflow.execute_activity_method(LockActivities.request_service_lock, self.request, summary=f"ask for the "
                                               f"{self.request.service} lock ({self.request.policy})", **options.QUICK)

    async def _recheck(self) -> LockAnswer | None:
        """What the lock's own state says of this still-waiting rollout; None when nothing yet (or not asked). A lock
        that no longer runs (terminated under its queue) is asked again: the fresh lock recovers this place from its claim."""
        state, why = await self._lock_state(options.RECHECK, own_queue=True)
        if why == LOCK_CLOSED and self.status == "waiting":
            await self._request()
            return None
        if state is None or self.status != "waiting":
            return None
        me = self.request.workflow_id
        if state.holder is not None and state.holder.workflow_id == me:
            self.status = "granted"
            return "granted", ""
        if me in state.refused:
            self.status = "refused"
            return "refused", state.refused[me]
        if me in state.superseded:
            return "superseded", state.superseded[me]
        return None

    async def release(self) -> None:
        """Give the lock back (also withdraws a request still waiting in the queue)."""
        if self.status in ("waiting", "granted"):
            self.status = "released"
            try:  # the lock runs in the machinery namespace
                delivered = await signal_across(lock_id(self.request.service), RELEASE_SIGNAL, self.request.workflow_id,
                                                to="machinery", summary="give back the lock")
            except ActivityError:
                delivered = False
            if not delivered:  # no lock runs (terminated, and nobody asked since): nothing to give back
                workflow.logger.warning("release of the %s lock not delivered", self.request.service)

    async def confirm_grant(self) -> str:
        """Take the lock if the lock's own state names this rollout as its holder; else say why not ('' = taken)."""
        if self.status != "waiting":
            return self._not_waiting()
        state, why = await self._lock_state()
        if state is None:
            return why
        holder = state.holder.workflow_id if state.holder is not None else None
        if holder != self.request.workflow_id:
            return f"the lock's holder is {holder or 'nobody'}"
        if self.status != "waiting":
            return self._not_waiting()
        self.status = "granted"
        return ""

    async def confirm_refusal(self) -> tuple[str | None, str]:
        """The lock's own reason if it refused this rollout (which then counts as refused), else None and why not."""
        if self.status != "waiting":
            return None, self._not_waiting()
        reason, why = await self._dropped("refused")
        if reason is not None and self.status == "waiting":
            self.status = "refused"
        return reason, why

    async def confirm_supersession(self) -> tuple[str | None, str]:
        """The version that superseded this rollout by the lock's own state, else None and why not."""
        if self.status not in ("waiting", "granted"):
            return None, f"this rollout neither holds nor waits for the lock (its request is {self.status})"
        return await self._dropped("superseded")

    async def _dropped(self, how: Literal["refused", "superseded"]) -> tuple[str | None, str]:
        """What the lock's own state records of refusing (the reason) or superseding (the version) this rollout."""
        state, why = await self._lock_state()
        if state is None:
            return None, why
        me = self.request.workflow_id
        found = (state.refused if how == "refused" else state.superseded).get(me)
        return (found, "") if found is not None else (None, f"the lock has not {how} this rollout ({standing(state, me)})")

    def _not_waiting(self) -> str:
        return f"this rollout is not waiting for the lock (its request is {self.status})"

    async def holder(self) -> str | None:
        """Whom this request waits behind by the lock's own state (its holder, else the first in line), or None."""
        state, _ = await self._lock_state()
        if state is None:
            return None
        ahead = [r.workflow_id for r in ([state.holder] if state.holder else []) + state.queue]
        return next((w for w in ahead if w != self.request.workflow_id), None)

    async def _lock_state(self, opts: options.ActivityOptions = options.CONFIRM,
                          own_queue: bool = False) -> tuple[LockState | None, str]:
        """The lock's own state (asked by an activity), or None and why not (LOCK_CLOSED: its latest run on this
        rollout's task queue has ended, known only when asked with `own_queue`)."""
        lock = lock_id(self.request.service)
        where = {"task_queue": workflow.info().task_queue, "workflow_type": LOCK_WORKFLOW} if own_queue else {}
        try:
            ask = PeerQuery(workflow_id=lock, query=LOCK_STATE_QUERY, namespace=self._locks, **where)
            answer = await workflow.execute_activity_method(PeerActivities.query_workflow, ask, summary=f"confirm with {lock}",
                                                            **opts)
        except ActivityError as err:
            return None, f"the lock could not be asked ({err.cause or err})"
        if answer.running is False or (own_queue and not answer.found):
            return None, LOCK_CLOSED
        if not answer.found or answer.error is not None:
            return None, f"the lock {lock} is not running" if not answer.found else f"the lock did not answer ({answer.error})"
        try:
            return LockState.model_validate(answer.answer), ""
        except ValidationError:
            return None, f"the lock {lock} answered with something else than its state"


class LockHolder:
    """The lock's three answers and the claim query, for every workflow that takes its service's lock (Temporal finds
    inherited handlers). The workflow keeps `lock` and `controls`, passes `_lock_answered` to `lock.acquire`, and says
    what a confirmed refusal or supersession does to it; the audit lines and the first-stop-wins rule are here."""

    lock: ServiceLock
    controls: Controls[Any]

    def _publish(self) -> None:
        raise NotImplementedError  # the workflow's own: its search attributes and details

    def _refused_by_lock(self, reason: str) -> None:
        raise NotImplementedError  # the lock refused this run (confirmed; the lock's reason): stop, saying why

    def _superseded_by(self, version: str) -> None:
        raise NotImplementedError  # a rollout of `version` superseded this run (confirmed, audited): stop, saying why

    @workflow.signal(name=GRANTED_SIGNAL, description="Internal: the service lock is ours (confirmed with the lock).")
    async def lock_granted(self, service: str) -> None:
        why = await self.lock.confirm_grant()
        if why:
            self._lock_ignored(GRANTED_SIGNAL, why)
        else:
            self.controls.audit("bifrost", "lock-granted", None, f"{self.lock.request.service} lock acquired")

    @workflow.signal(name=REFUSED_SIGNAL, description="Internal: the service lock was refused (policy 'reject'; "
                                                       "confirmed with the lock).")
    async def lock_refused(self, reason: str) -> None:
        confirmed, why = await self.lock.confirm_refusal()
        if confirmed is None:
            self._lock_ignored(REFUSED_SIGNAL, why)
        else:
            self._refused_by_lock(confirmed)

    @workflow.signal(name=SUPERSEDED_SIGNAL, description="Internal: a newer version superseded this run (policy "
                                                          "'supersede'; confirmed with the lock).")
    async def superseded(self, version: str) -> None:
        if self.controls.stopping or self.controls.finished:
            now = self.controls.stop.status if self.controls.stop is not None else self.controls.state.status
            return self._lock_ignored(SUPERSEDED_SIGNAL, f"the {self.controls.noun} is already {now}")
        confirmed, why = await self.lock.confirm_supersession()
        if confirmed is None:
            self._lock_ignored(SUPERSEDED_SIGNAL, why)
        else:
            self._take_supersession(confirmed, "")

    @workflow.query(name=LOCK_CLAIM_QUERY, description="Internal: this run's service-lock request and where it stands "
                                                       "(the lock confirms acquire and release signals against it).")
    def lock_claim(self) -> LockClaim:
        return self.lock.claim()

    def _lock_answered(self, answer: LockAnswer) -> None:
        """The run's own re-check found the lock's answer in the lock's state (its signal was lost or unconfirmed)."""
        kind, detail = answer
        if kind == "granted":
            self.controls.audit("bifrost", "lock-granted", None, f"{self.lock.request.service} lock acquired ({FOUND})")
        elif kind == "refused":
            self._refused_by_lock(detail)
        else:
            self._take_supersession(detail, f" ({FOUND})")

    def _take_supersession(self, version: str, found: str) -> None:
        if not self.controls.stopping:  # the first reason to stop wins
            self.controls.audit("bifrost", "superseded", None, f"by version {version}{found}")
            self._superseded_by(version)

    def _lock_ignored(self, signal: str, why: str) -> None:
        """A lock signal that does not fit the lock's own state: ignored, one audit line (shown at once)."""
        self.controls.audit("bifrost", f"ignored {signal}", None, why)
        self._publish()
