"""What a stage says about itself: its `stage_progress` signal is only a poke; the rollout takes the stage's own
answer to its `progress` query (asked by an activity) into its row, and audits a report that does not fit it.
A stage's end is its own account too: its result, or the state it attached to its failure."""

from __future__ import annotations

import asyncio

from pydantic import ValidationError
from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.errors import error_text
    from activities.peers import PeerActivities, PeerQuery
    from common.namespaces import machinery_namespace
    from workflows import options
    from workflows.rollout.context import Rollout
    from workflows.rollout.holds import Holds
    from workflows.rollout.stage_runs import stage_failure
    from workflows.stage.context import PROGRESS_SIGNAL
    from workflows.stage.models import StageDetail, StageState


class Progress:
    """Takes a stage's progress from the stage itself, one question at a time per stage."""

    def __init__(self, rollout: Rollout, holds: Holds) -> None:
        self.r = rollout
        self.holds = holds
        self._pokes: dict[str, list[StageState]] = {}
        self._confirming: dict[str, asyncio.Lock] = {}

    async def reported(self, report: StageState) -> None:
        """A stage says its status changed: ask it, take its answer, audit every report that does not fit."""
        r, key = self.r, report.key
        if r.state.stage(key) is None or key not in r.launched:
            r.ignored(PROGRESS_SIGNAL, None, f"this rollout has started no stage {key[:80]!r}")
            return
        if key in r.collected:
            r.ignored(PROGRESS_SIGNAL, key, f"{key} has ended; its result is what counts")
            return
        self._pokes.setdefault(key, []).append(report)
        async with self._confirming.setdefault(key, asyncio.Lock()):  # one question at a time per stage
            pokes = self._pokes.pop(key, [])
            if not pokes:
                return  # answered by the question before
            detail, why = await self._ask(key)
            if key in r.collected:
                return  # it ended meanwhile: its result is what counts
            truth = detail.state if detail is not None else None
            for poke in pokes:
                problem = why if truth is None else does_not_fit(poke, truth)
                if problem:
                    r.audit("bifrost", f"ignored {PROGRESS_SIGNAL}", key, problem)
            if truth is not None:
                take(r.row(key), truth)
                if truth.status == "held":
                    self.holds.stage_held(key)
            r.publish()

    async def _ask(self, key: str) -> tuple[StageDetail | None, str]:
        """The stage's own account (its `progress` query, asked by an activity), or None and why not."""
        stage = self.r.child_id(key)
        try:
            answer = await workflow.execute_activity_method(
                PeerActivities.query_workflow, PeerQuery(workflow_id=stage, query="progress",
                                                         namespace=machinery_namespace(workflow.info().namespace)),
                summary=f"confirm with {stage}", **options.CONFIRM)
        except ActivityError as err:
            return None, f"the stage could not be asked ({error_text(err)})"
        if not answer.found or answer.error is not None:
            return None, "the stage does not exist" if not answer.found else f"the stage did not answer ({answer.error})"
        try:
            return StageDetail.model_validate(answer.answer), ""
        except ValidationError:
            return None, "the stage answered with something else than its progress"


def take(row: StageState, report: StageState) -> None:
    """Take a stage's own account into the rollout's row; the wave, key and launch time stay the rollout's."""
    for name, value in report.model_dump(exclude={"key", "region", "environment", "wave", "launched_at"}).items():
        setattr(row, name, value)


# The order a stage's statuses come in: a report behind the stage's own answer is merely older than it.
_STAGE_RANK = {s: i for i, s in enumerate(["pending", "deploying", "analyzing", "held", "promoting", "soaking", "succeeded",
                                            "evacuating", "rolling_back", "restoring_traffic"])}


def does_not_fit(report: StageState, truth: StageState) -> str:
    """Why a progress report cannot have come from the stage, given its own answer now ('' if it could have)."""
    r, t = _STAGE_RANK.get(report.status, len(_STAGE_RANK)), _STAGE_RANK.get(truth.status, len(_STAGE_RANK))
    if r < t:
        return ""  # an older report: the stage has moved on
    if r == t and report.verdict in (None, truth.verdict) and report.report_url in (None, truth.report_url) \
            and report.soak_looks <= truth.soak_looks and (truth.awaiting_verdict or not report.awaiting_verdict):
        return ""
    return (f"the stage says it is {truth.status} (verdict {truth.verdict or 'none'}), not {report.status} "
            f"(verdict {report.verdict or 'none'})")


def failure_state(err: BaseException) -> StageState | None:
    """The state a stage attached to its failure (RolledBack, Failed), or None if it failed for another reason."""
    cause = stage_failure(err)
    if cause is not None:
        try:
            return StageState.model_validate(cause.details[0])
        except ValueError:
            return None
    return None
