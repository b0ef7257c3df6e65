"""`ControlledState`: the base of a controlled workflow's state, whose `status` and `waiting_for` are computed from
its phase and holds on every read, never stored, so no code path can leave them stale.

Both still appear in `model_dump` and JSON (the `status` query's answer, the CLI, the UI, a continue-as-new input
and the outcome memo carry them); reading such a dump back ignores the two keys and computes them again. A state
written with only its status word and no phase (a dump from before phases, a hand-built state) takes that word as
its phase when it is one of its phases.

    class GuardState(ControlledState[GuardStatus]):
        TERMINAL = GUARD_TERMINAL
        phase: GuardPhase = "watching"
        holds: list[Hold] = ...
        doing: str | None = None
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, TypeVar, cast, get_args, get_origin

from pydantic import BaseModel, computed_field, model_validator

from workflows.controls.holds import Hold, status_of, waiting_for

StatusT = TypeVar("StatusT", bound=str)


class ControlledState(BaseModel, Generic[StatusT]):
    """A workflow's state with a phase and holds; `StatusT`: its status words (common/vocabulary.py)."""

    TERMINAL: ClassVar[frozenset[str]] = frozenset()  # the phases it ends in: its status then is the phase itself

    if TYPE_CHECKING:  # declared by each subclass, with its own words and descriptions
        phase: str
        holds: list[Hold]
        doing: str | None

    @model_validator(mode="before")
    @classmethod
    def _phase_from_status(cls, data: Any) -> Any:
        """A dump with a status word and no phase: that word is its phase, when it is one."""
        if isinstance(data, dict) and "phase" not in data and data.get("status") in _phases(cls):
            return {**data, "phase": data["status"]}
        return data

    @computed_field(description="derived from phase and holds (controls.status_of)")  # type: ignore[prop-decorator]
    @property
    def status(self) -> StatusT:
        """The status word: the phase, or, while it works and a hold is in force, that hold's word."""
        return cast(StatusT, status_of(str(self.phase), self.holds, self.TERMINAL))

    @computed_field(description="derived: the hold in force, else what it is doing (none once it ended)")  # type: ignore[prop-decorator]
    @property
    def waiting_for(self) -> str | None:
        """What it waits for: the hold in force (by precedence), else what it is doing; nothing once it ended."""
        return None if str(self.phase) in self.TERMINAL else waiting_for(self.holds, self.doing)


def _phases(cls: type[BaseModel]) -> tuple[Any, ...]:
    field = cls.model_fields.get("phase")
    annotation = field.annotation if field is not None else None
    return get_args(annotation) if get_origin(annotation) is Literal else ()
