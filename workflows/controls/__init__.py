"""The controls every Bifrost workflow shares: stop, pause and resume, typed holds, the audit trail, and how a
workflow's state reaches its search attributes and the UI's current details.

A workflow keeps a coarse *phase* (what it is doing) and a list of typed *holds* (what keeps it from going on:
a pause, the service lock, an approval, a deployment window, a region whose traffic is away), as Argo Rollouts keeps a phase and pause
conditions. The status word users see (BifrostStatus, the `status` query, the CLI) is derived from the two by
`status_of`, and the search attributes and details are published from the state by `Controls.publish` only.

How a workflow uses it (the rollout, the evacuation, the revert and the region guard do):

    state: carries `phase`, `holds: list[Hold]`, `audit: list[AuditEntry]`, `doing`, and the derived `status`
           and `waiting_for` (see RolloutState, EvacuationState)
    self.controls = Controls[MyStop](self.state, noun="region guard of eu-west-1", terminal=MY_TERMINAL)
    pause, resume: pause, resume = pause_updates(holds_at="before the next step", pause="...", resume="...")
                   (the updates and their validators; the rollout, which also tells its stages, writes its own
                   with self.controls.pause / validate_pause / resume / validate_resume)
    abort update:  abort = stop_update(AbortShift, _abort, description="...")  -- `_abort` records the stop
                   (self.controls.halt(req), an audit line); then at safe points: self.controls.raise_if_stopped()
    safe point:    await self.controls.wait_unpaused("step 2/3", self._publish)
    holds:         self.controls.hold("approval", releases="approve (by alice)") ... self.controls.release("approval")
    audit:         self.controls.audit("alice", "approve", target, "comment")
    phase:         self.controls.enter("shifting", doing="step 1/3"); self._publish()
    _publish:      self.controls.publish([search.STATUS.value_set(self.state.status), ...], details_of(self.state))
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Annotated, Any, Generic, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from temporalio import workflow
from temporalio.common import SearchAttributeUpdate
from temporalio.exceptions import ApplicationError

from common.text import MAX_IDENTITY, Identity, visible
from common.types import REFUSED

HoldReason = Literal["paused", "lock", "approval", "window", "traffic", "failure"]
# The status word a hold shows while it is in force (BifrostStatus): the user-visible words stay as they were.
# `failure`: a stage failed with `on_failure: hold`; it keeps its canary and baseline until a release manager
# retries, promotes or rolls it back (resolve_hold), or the hold times out (the request's `hold.on_timeout`).
HOLD_STATUS: Mapping[str, str] = {"paused": "paused", "lock": "queued", "approval": "awaiting_approval",
                                  "window": "waiting_window", "traffic": "waiting_traffic", "failure": "held"}
# When several holds are in force at once, the status names the first of these: a failed stage needs a person first.
HOLD_PRECEDENCE: tuple[str, ...] = ("failure", "paused", "approval", "window", "traffic", "lock")

class Payload(BaseModel):
    """Base of every update payload: one JSON object, typed into the UI's update dialog.

    Strict: `"wave": true` or `"wave": "1"` is refused, never read as wave 1; unknown fields are refused."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, strict=True)


class Ack(BaseModel):
    """What every update returns: what was done, in one line."""

    ok: bool = True
    message: str


Name = Annotated[Identity, Field(min_length=1, max_length=MAX_IDENTITY, description="who acts (recorded in the audit trail)")]


class Pause(Payload):
    """{"by": "alice", "reason": "db migration"} — holds at the next safe point."""

    by: Name
    reason: str = Field(default="", max_length=2000)


class Resume(Payload):
    """{"by": "alice"}"""

    by: Name


def refused(message: str) -> ApplicationError:
    """A validator's refusal: one line for the UI and the CLI, with no stack trace (worker/converter.py)."""
    return ApplicationError(message, type=REFUSED, non_retryable=True)


def check_approver(who: str, approvers: Sequence[str], *, field: str, source: str) -> None:
    """The one approver check of every update that approves or decides (gates, soaks, windows, holds, evacuations,
    the guard's proposals): refuse `who` unless on `approvers`. An empty list lets anyone who may send updates
    decide (the request's, the evacuation's and the guard's documented default). The refusal names the field, the
    name (escaped: one line, no control characters) and where the list is set, but not the names on it: whoever
    may send an update should not learn from a refusal whose name would pass."""
    if not approvers or who in approvers:
        return
    raise refused(f"{field}: {visible(who)!r} may not approve or decide here: the name is not on the list of "
                  f"approvers ({source})")


class Stopped(Exception):
    """Internal: the workflow was told to stop (abort, reject, supersede, cancel); unwinds to its stop handling."""


class AuditEntry(BaseModel):
    """One action on a workflow: who, what, when (workflow time), on what and why."""

    at: datetime
    who: str
    action: str
    target: str | None = None
    detail: str = ""


class Hold(BaseModel):
    """One thing that keeps a workflow from going on: why (typed), since when, who placed it, what releases it."""

    reason: HoldReason
    since: datetime
    by: str = Field(description="who placed it: a person (pause) or 'bifrost' (lock, approval, window, failure)")
    why: str = Field(default="", description="the person's reason, as typed (escaped where shown)")
    releases: str = Field(description="what releases it, e.g. 'resume', 'approval of wave 4 (gates: ...)'")
    at: str = Field(default="", description="where it holds, e.g. 'before wave 3' (empty: where the workflow is)")
    targets: list[str] = Field(default_factory=list, description="what it holds back: stage keys or regions")
    in_force: bool = Field(default=True, description="false: asked for, takes hold at the next safe point")
    wave: int | None = Field(default=None, description="an approval: the wave it holds back (rollouts)")
    gates: list[str] = Field(default_factory=list, description="an approval: the gates still to approve")
    until: datetime | None = Field(default=None, description="when it ends on its own (a failure hold: its timeout)")

    @property
    def waiting_for(self) -> str:
        """One line: what the workflow waits for while this hold holds it."""
        return f"{self.releases} (held {self.at})" if self.at else self.releases


class Controlled(Protocol):
    """What a workflow's state carries for its controls."""

    phase: Any
    holds: list[Hold]
    audit: list[AuditEntry]
    doing: str | None
    status: Any  # derived: status_of(phase, holds)
    waiting_for: str | None  # derived: waiting_for(holds, doing)


def status_of(phase: str, holds: Sequence[Hold], terminal: frozenset[str]) -> str:
    """The one status word of a workflow: its phase, or, while it works and a hold is in force, that hold's word."""
    if phase in terminal:
        return phase
    held = {h.reason for h in holds if h.in_force}
    for reason in HOLD_PRECEDENCE:
        if reason in held:
            return HOLD_STATUS[reason]
    return phase


def waiting_for(holds: Sequence[Hold], doing: str | None = None) -> str | None:
    """What the workflow waits for: the hold in force (by precedence), else what it is doing now."""
    held: dict[str, Hold] = {}
    for h in holds:
        if h.in_force:
            held.setdefault(h.reason, h)
    for reason in HOLD_PRECEDENCE:
        if reason in held:
            return held[reason].waiting_for
    return doing


def find_hold(holds: Sequence[Hold], reason: HoldReason) -> Hold | None:
    return next((h for h in holds if h.reason == reason), None)


def audit_entry(who: str, action: str, target: str | None = None, detail: str = "") -> AuditEntry:
    """One audit line, at workflow time (for a workflow without Controls, e.g. a stage's ignored signals)."""
    return AuditEntry(at=workflow.now(), who=who, action=action, target=target, detail=detail)


async def until(condition: Callable[[], bool], timeout: timedelta | None = None, summary: str | None = None, *,
                on_cancel: Callable[[], None]) -> bool:
    """Wait for `condition` (True) or the timeout (False) without being cut short by a cancellation request,
    which goes to `on_cancel` (it may make `condition` true): for waits the workflow must finish."""
    while True:
        try:
            await workflow.wait_condition(condition, timeout=timeout, timeout_summary=summary or None)
            return True
        except TimeoutError:
            return False
        except asyncio.CancelledError:
            on_cancel()
            if condition():
                return True


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
    def sync(self) -> None:
        """Derive the status word and what the workflow waits for from its phase and holds (no command)."""
        st = self.state
        st.status = status_of(str(st.phase), st.holds, self.terminal)
        st.waiting_for = None if self.finished else waiting_for(st.holds, st.doing)

    def enter(self, phase: Any, *, doing: str | None = None) -> None:
        """Move to `phase`, doing `doing` (what it works on, shown while no hold holds it)."""
        self.state.phase = phase
        self.state.doing = doing
        if str(phase) in self.terminal:
            self.state.holds.clear()
        self.sync()

    def hold(self, reason: HoldReason, *, releases: str, by: str = "bifrost", why: str = "", at: str = "",
             targets: Sequence[str] = (), in_force: bool = True, wave: int | None = None,
             gates: Sequence[str] = (), until: datetime | None = None) -> Hold:
        """Place (or replace) the hold of this reason."""
        self.release(reason)
        h = Hold(reason=reason, since=workflow.now(), by=by, why=why, releases=releases, at=at,
                 targets=list(targets), in_force=in_force, wave=wave, gates=list(gates), until=until)
        self.state.holds.append(h)
        self.sync()
        return h

    def held(self, reason: HoldReason) -> Hold | None:
        return find_hold(self.state.holds, reason)

    def release(self, reason: HoldReason) -> Hold | None:
        """Clear the hold of this reason; the hold released, or None."""
        h = self.held(reason)
        if h is not None:
            self.state.holds.remove(h)
            self.sync()
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
        self.sync()
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
        entry = audit_entry(who, action, target, detail)
        self.state.audit.append(entry)
        return entry

    # -- publication -----------------------------------------------------------------------------
    def publish(self, search_attributes: Sequence[SearchAttributeUpdate[Any]], details: str) -> None:
        """The one place a workflow sets its search attributes and current details.

        Call it after `sync` (hold, release, enter call it). Upserts only when a value changed (one history event
        each)."""
        values = {u.key.name: u.value for u in search_attributes}
        if values != self._published:
            workflow.upsert_search_attributes(list(search_attributes))
            self._published = values
        workflow.set_current_details(details)


# -- the update handlers every controlled workflow shares ------------------------------------------------------
class ControlledWorkflow(Protocol):
    """What the shared update handlers need of a workflow: its controls, and how it publishes its state."""

    @property
    def controls(self) -> Controls[Any]: ...

    def _publish(self) -> None: ...


W = TypeVar("W", bound=ControlledWorkflow)
P = TypeVar("P", bound=Payload)
F = TypeVar("F", bound=Callable[..., Any])


def _handler(fn: F, payload: type[Payload], returns: type[Ack] | None) -> F:
    """Give a handler built here the annotations the SDK reads its payload type from. The SDK would count an
    annotated `self` as an argument, so at run time only `req` and the return are annotated (as real types)."""
    fn.__annotations__ = {"req": payload, "return": returns}
    return fn


def pause_updates(*, holds_at: str, pause: str, resume: str) -> tuple[
        workflow.UpdateMethodMultiParam[[ControlledWorkflow, Pause], Ack],
        workflow.UpdateMethodMultiParam[[ControlledWorkflow, Resume], Ack]]:
    """The `pause` and `resume` updates with their validators; a workflow declares where a pause holds and how
    the UI describes the two (`pause`, `resume`: the update dialog's descriptions).

        pause, resume = pause_updates(holds_at="before the next step", pause="Hold before ...", resume="Continue ...")
    """

    def do_pause(self: ControlledWorkflow, req: Pause) -> Ack:
        self.controls.pause(req.by, req.reason, holds_at=holds_at)
        self._publish()
        return Ack(message=f"paused by {req.by}; holds {holds_at}")

    def validate_pause(self: ControlledWorkflow, req: Pause) -> None:
        self.controls.validate_pause()

    def do_resume(self: ControlledWorkflow, req: Resume) -> Ack:
        self.controls.resume(req.by)
        self._publish()
        return Ack(message=f"resumed by {req.by}")

    def validate_resume(self: ControlledWorkflow, req: Resume) -> None:
        self.controls.validate_resume()

    paused = workflow.update(name="pause", description=pause)(_handler(do_pause, Pause, Ack))
    paused.validator(_handler(validate_pause, Pause, None))
    resumed = workflow.update(name="resume", description=resume)(_handler(do_resume, Resume, Ack))
    resumed.validator(_handler(validate_resume, Resume, None))
    return paused, resumed


def stop_update(payload: type[P], act: Callable[[W, P], str], *, description: str,
                name: str = "abort") -> workflow.UpdateMethodMultiParam[[W, P], Ack]:
    """The update that stops a workflow (`abort`, the guard's `stop`), refused once it ended or is stopping.

    `act` records the stop (Controls.halt, the audit line) and says in one line what happens now."""

    def do_stop(self: W, req: P) -> Ack:
        return Ack(message=act(self, req))

    def validate_stop(self: W, req: P) -> None:
        self.controls.check_running()

    update = workflow.update(name=name, description=description)(_handler(do_stop, payload, Ack))
    update.validator(_handler(validate_stop, payload, None))
    return update
