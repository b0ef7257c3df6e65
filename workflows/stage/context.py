"""What every part of a stage shares: its input and state, how it shows itself and tells its rollout, how it waits
and runs activities without being cut short, and the internal failures that make it roll back.

The stage's parts (orders, judge, holds, soak, traffic, rollback) each hold one `StageContext`, created by the
workflow, and change the stage only through it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

from temporalio import workflow

from activities.models import ReportInput
from common.types import OUTCOME_FAILURE_TYPES, StageRef, StageStatus
from workflows.controls import Outbox, until
from workflows.controls.crossing import signal_across
from workflows.report.workflow import start_report
from workflows.stage.details import stage_details
from workflows.stage.models import StageDetail, StageInput

PROGRESS_SIGNAL = "stage_progress"  # the rollout's handler for a stage's reports
# The rollout takes a stage's progress from the stage's own `progress` query, not from the report signal.

T = TypeVar("T")


class Failed(Exception):
    """Internal: the stage cannot go on; `reason` says why. It rolls back. `stopped`: the rollout's stop is the
    cause (the stage did not fail on its own, so it completes rolled back instead of failing red)."""

    def __init__(self, reason: str, *, stopped: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.stopped = stopped


class Judged(Failed):
    """Internal: the canary failed its analysis (its verdict, or the analysis could not be made): with
    `on_failure: hold` the stage holds for a decision instead of rolling back."""


class StageContext:
    """One stage's input and whole state (`detail`, carried through continue-as-new), and its plumbing."""

    def __init__(self, inp: StageInput, detail: StageDetail) -> None:
        self.inp = inp
        self.ref = StageRef(service=inp.service, region=inp.region, environment=inp.environment)
        self.detail = detail
        self.state = detail.state
        self.cancelled = False
        self.reported: StageStatus | None = None  # the last status the rollout was told
        self.outbox = Outbox()  # its reports to the rollout and the report workflows it starts, flushed before it ends

    @property
    def key(self) -> str:
        return self.ref.key

    def report(self, status: StageStatus, detail: str = "", *, tell_rollout: bool = True) -> None:
        """Show the stage on its page and, when something the rollout shows changed, tell the rollout."""
        self.state.status = status
        workflow.set_current_details(stage_details(self.state, service=self.inp.service, version=self.inp.version,
                                                   detail=detail))
        if not tell_rollout or status in OUTCOME_FAILURE_TYPES or status == "skipped":
            return  # how a stage ends reaches the rollout as its result, not as a report
        self.reported = status
        # Fire and forget: the stage never waits on the rollout; the futures are awaited before it ends. The rollout
        # runs in the namespace people open, so an activity sends the signal there.
        self.outbox.add(signal_across(self.inp.rollout_id, PROGRESS_SIGNAL, self.state.model_copy(), to="home",
                                      summary=f"report {status} to the rollout"))

    def draw(self, report: ReportInput, summary: str) -> None:
        """Have a ReportWorkflow draw and store a report; the stage waits only until that workflow has started."""
        self.outbox.add(start_report(report, summary))

    def set_stop(self, reason: str) -> None:
        if self.detail.stop_reason is None:
            self.detail.stop_reason = reason or "stopped by the rollout"

    def cancel_requested(self) -> None:
        """A workflow cancellation request: a stop while the stage works; 'keep' once it waits for the verdict."""
        self.cancelled = True
        if not self.state.awaiting_verdict:
            self.set_stop(f"cancellation requested on {self.key}")

    async def shielded(self, activity: Awaitable[T]) -> T:
        """Run an activity to its end even if the workflow is asked to cancel (which is then noted, not obeyed)."""
        task = asyncio.ensure_future(activity)
        while True:
            try:
                return await asyncio.shield(task)
            except asyncio.CancelledError:
                if task.done():
                    return task.result()
                self.cancel_requested()

    async def until(self, condition: Callable[[], bool], timeout: timedelta | None = None, summary: str = "") -> bool:
        """Wait for `condition` (True) or the timeout (False); a cancellation request is noted, not raised (it cuts
        a timed wait short only through the condition: stop_reason)."""
        return await until(condition, timeout, summary, on_cancel=self.cancel_requested)

    def stopped(self) -> bool:
        return self.detail.stop_reason is not None

    def check_stop(self) -> None:
        if self.detail.stop_reason is not None:
            raise Failed(f"stopped: {self.detail.stop_reason}", stopped=True)
