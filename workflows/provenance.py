"""Ids are claims, not proof: the checks a workflow that must be the only one of its kind makes on its own start.

A person who may act on the namespace can start any workflow type under any id with any input. A rollout, a revert,
the region guard and the drill refuse, on their first workflow task (no command yet, so good runs record exactly what
they did), to run under an id that is not theirs, and the guard refuses a `state` that only its own continue-as-new
may carry. The server's facts decide: `workflow.info().workflow_id` and `continued_run_id`, never what the input says.
(The evacuation checks its id in its plan activity: activities/traffic/shift.py; the lock, stages and reports check
their parentage in workflows/parentage.py.)
"""

from __future__ import annotations

import re

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from common.failures import INVALID_PAYLOAD
    from common.problems import show
    from common.types import INVALID_REQUEST

# The workflow id a Temporal Schedule gives each run: its action's id, "-", the nominal time in RFC 3339, UTC
# (the server's `workflowID-2006-01-02T15:04:05Z`); `bifrost drill run` adds "/" and a few letters instead.
_SCHEDULED = re.compile(r"-\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")
_BY_HAND = re.compile(r"/[A-Za-z0-9_-]{1,40}")


def refuse_start(what: str, field: str, why: str) -> ApplicationError:
    """The run's failure: one line naming the field, non-retryable, no stack (a quiet failure type)."""
    return ApplicationError(f"{what} refused, nothing was started: {field}: {why}", type=INVALID_REQUEST,
                            non_retryable=True)


def require_id(what: str, want: str) -> None:
    """Fail the run unless it runs as exactly `want` (the one id its kind may have)."""
    have = workflow.info().workflow_id
    if have != want:
        raise refuse_start(what, "service", f"it runs only as workflow id {want}, not {have}")


def require_drill_id(what: str, base: str) -> None:
    """Fail the run unless its id is the drill schedule's (`base`-<nominal time>) or a drill run by hand (`base`/x)."""
    have = workflow.info().workflow_id
    rest = have[len(base):] if have.startswith(base) else None
    if rest is None or not (_SCHEDULED.fullmatch(rest) or _BY_HAND.fullmatch(rest)):
        raise refuse_start(what, "service", f"a drill of it runs only as workflow id {base}-<scheduled time> (its "
                           f"schedule) or {base}/<run> (`bifrost drill run`), not {have}")


def own_continue_as_new(info: workflow.Info) -> bool:
    """This run was begun by its own previous run's continue-as-new: not by a client (a start has no
    `continued_run_id`), nor by a cron schedule or a retry, which also set it but run the first input again."""
    return info.continued_run_id is not None and not info.cron_schedule and info.attempt == 1


def require_continued(what: str, field: str, carried: object, info: workflow.Info | None = None) -> None:
    """Fail the run if `field` is given to a run that is not its own continue-as-new (only the workflow's own code
    continues as new, so only it can have written what the field carries). `info`: the run's (workflow.info())."""
    if carried is not None and not own_continue_as_new(info or workflow.info()):
        raise refuse_start(what, field, "only the workflow's own continue-as-new carries it; leave it out")


def is_own_id(actual: str, expected: str, *, suffixed: bool = False) -> bool:
    """`actual` is `expected`, or (with `suffixed`) `expected/<anything>`: ids that only add to the canonical one
    (tests run several rollouts of one version side by side as `rollout/<service>/<version>/<n>`) still name their
    own service and version truthfully."""
    return actual == expected or (suffixed and actual.startswith(expected + "/"))


def require_own_id(actual: str, expected: str, *, what: str, suffixed: bool = False) -> None:
    """Fail the run unless it runs as `expected` (or, with `suffixed`, as `expected/<anything>`: is_own_id)."""
    if is_own_id(actual, expected, suffixed=suffixed):
        return
    raise ApplicationError(f"workflow id: {what} must run as {show(expected, 200)}, not {show(actual, 200)}; "
                           f"nothing was done", type=INVALID_PAYLOAD, non_retryable=True)
