"""The update handlers every controlled workflow shares: `pause` and `resume`, and the update that stops it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from temporalio import workflow

from workflows.controls.controller import Controls
from workflows.controls.payloads import Ack, Pause, Payload, Resume


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
