"""`Controls`: one workflow's controls over its state: stop, pause and resume, holds, the audit trail, publication."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, Generic, Protocol, TypeVar

from temporalio import workflow
from temporalio.common import SearchAttributeUpdate

from common.vocabulary import HoldReason
from workflows.controls.audit import AuditEntry, audit_entry
from workflows.controls.holds import Hold, find_hold
from workflows.controls.payloads import refused
from workflows.controls.reset import ResetFold
from workflows.controls.stopping import Stopped, until


class Controlled(Protocol):
    """What a workflow's state carries for its controls."""

    phase: Any
    holds: list[Hold]
    audit: list[AuditEntry]
    doing: str | None

    @property
    def status(self) -> Any: ...  # computed: status_of(phase, holds) (ControlledState)

    @property
    def waiting_for(self) -> str | None: ...  # computed: waiting_for(holds, doing)


StopT = TypeVar("StopT")


class Controls(Generic[StopT]):
    """One workflow's controls over its state: stop, pause/resume, holds, audit, publication."""

    def __init__(self, state: Controlled, *, noun: str, terminal: frozenset[str],
                 on_cancel: Callable[[], None] | None = None, stop_word: Callable[[StopT], str] | None = None) -> None:
        self.state = state
        self.noun = noun  # "rollout", "evacuation of eu-west-1": how refusals name the workflow
        self.terminal = terminal
        self._stop_word = stop_word  # how a refusal names a stopping workflow (default: "stopping")
        self.stop: StopT | None = None
        self._on_cancel = on_cancel
        self._published: dict[str, Any] | None = None
        self._reset = ResetFold()

    # -- stopping --------------------------------------------------------------------------------
    def halt(self, stop: StopT) -> bool:
        """Record why the workflow must stop; the first reason wins. True if this one was taken."""
        if self.stop is not None:
            return False
        self.stop = stop
        return True

    @property
    def stopping(self) -> bool:
        return self.stop is not None

    def raise_if_stopped(self) -> None:
        if self.stop is not None:
            raise Stopped()

    @property
    def finished(self) -> bool:
        return str(self.state.phase) in self.terminal

    async def until(self, condition: Callable[[], bool], timeout: timedelta | None = None,
                    summary: str | None = None) -> bool:
        """Wait for `condition` (True) or the timeout (False); a cancellation request goes to `on_cancel`
        (without one, it is raised)."""
        if self._on_cancel is None:
            try:
                await workflow.wait_condition(condition, timeout=timeout, timeout_summary=summary or None)
            except TimeoutError:
                return False
            return True
        return await until(condition, timeout, summary, on_cancel=self._on_cancel)

    # -- phase and holds -------------------------------------------------------------------------
    def enter(self, phase: Any, *, doing: str | None = None) -> None:
        """Move to `phase`, doing `doing` (what it works on, shown while no hold holds it)."""
        self.state.phase = phase
        self.state.doing = doing
        if str(phase) in self.terminal:
            self.state.holds.clear()

    def hold(self, reason: HoldReason, *, releases: str, by: str = "bifrost", why: str = "", at: str = "",
             targets: Sequence[str] = (), in_force: bool = True, wave: int | None = None,
             gates: Sequence[str] = (), until: datetime | None = None, then: str = "", deciders: str = "") -> Hold:
        """Place (or replace) the hold of this reason."""
        self.release(reason)
        h = Hold(reason=reason, since=workflow.now(), by=by, why=why, releases=releases, at=at,
                 targets=list(targets), in_force=in_force, wave=wave, gates=list(gates), until=until, then=then,
                 deciders=deciders)
        self.state.holds.append(h)
        return h

    def held(self, reason: HoldReason) -> Hold | None:
        return find_hold(self.state.holds, reason)

    def release(self, reason: HoldReason) -> Hold | None:
        """Clear the hold of this reason; the hold released, or None."""
        h = self.held(reason)
        if h is not None:
            self.state.holds.remove(h)
        return h

    @property
    def paused(self) -> Hold | None:
        return self.held("paused")

    async def wait_unpaused(self, where: str, publish: Callable[[], None]) -> bool:
        """A safe point: if paused, hold here (the pause is in force, shown) until resumed or stopped.
        Raises Stopped once stopped. True if it held."""
        self.raise_if_stopped()
        pause = self.paused
        if pause is None:
            return False
        pause.in_force, pause.at = True, f"before {where}"
        publish()
        await workflow.wait_condition(lambda: self.paused is None or self.stop is not None)
        self.raise_if_stopped()
        return True

    # -- updates ---------------------------------------------------------------------------------
    def check_running(self) -> None:
        """Refuse an update to a workflow that has ended or is stopping."""
        if self.finished or self.stop is not None:
            now = str(self.state.phase)
            if self.stop is not None and not self.finished:
                now = self._stop_word(self.stop) if self._stop_word is not None else "stopping"
            raise refused(f"the {self.noun} is already {now}; nothing to do")

    def validate_pause(self) -> None:
        self.check_running()
        if self.paused is not None:
            raise refused(f"the {self.noun} is already paused (by {self.paused.by}); use resume")

    def validate_resume(self) -> None:
        self.check_running()
        if self.paused is None:
            raise refused(f"the {self.noun} is not paused")

    def pause(self, by: str, why: str, *, holds_at: str) -> None:
        """Ask for a pause: recorded at once, in force at the next safe point (`holds_at` says where)."""
        self.hold("paused", by=by, why=why, releases="resume", at=holds_at, in_force=False)
        self.audit(by, "pause", None, why)

    def resume(self, by: str) -> None:
        self.release("paused")
        self.audit(by, "resume", None)

    # -- the audit trail -------------------------------------------------------------------------
    def audit(self, who: str, action: str, target: str | None = None, detail: str = "") -> AuditEntry:
        folded = self._reset.take(self.state.audit, action)  # a reset run's re-applied signals: one line
        if folded is not None:
            return folded
        entry = audit_entry(who, action, target, detail)
        self.state.audit.append(entry)
        return entry

    # -- publication -----------------------------------------------------------------------------
    def publish(self, search_attributes: Sequence[SearchAttributeUpdate[Any]], details: str) -> None:
        """The one place a workflow sets its search attributes and current details.

        The state's status and waiting_for are computed, so what it publishes is never stale. Upserts only when a value changed (one history event
        each)."""
        values = {u.key.name: u.value for u in search_attributes}
        if values != self._published:
            workflow.upsert_search_attributes(list(search_attributes))
            self._published = values
        workflow.set_current_details(details)
