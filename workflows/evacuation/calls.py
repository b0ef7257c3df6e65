"""How an evacuation calls its traffic activities (timeouts, retries, cancellation) and reads their failures.

Every activity on the path heartbeats (activities/heartbeat.py), so a dead worker's activity moves to another
worker within the heartbeat timeout instead of its start-to-close timeout.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from activities.traffic.shift import CONFLICT, REFUSED
    from workflows import options

NON_RETRYABLE = [*options.NON_RETRYABLE, REFUSED, CONFLICT]


def _retried(timeout: timedelta, first: timedelta, most: timedelta, attempts: int) -> options.ActivityOptions:
    """Heartbeating options with a bounded retry that never retries a refusal or a conflict."""
    return options.ActivityOptions(
        start_to_close_timeout=timeout, heartbeat_timeout=options.HEARTBEAT,
        retry_policy=RetryPolicy(initial_interval=first, maximum_interval=most, maximum_attempts=attempts,
                                 non_retryable_error_types=NON_RETRYABLE))


PLAN = _retried(timedelta(minutes=2), timedelta(seconds=1), timedelta(seconds=30), 5)
# A weight change waits for Route 53 to be INSYNC (minutes at worst); a retry is safe (a no-op once applied).
SET_WEIGHTS = _retried(timedelta(minutes=10), timedelta(seconds=2), timedelta(minutes=1), 10)
SCALE = _retried(timedelta(minutes=15), timedelta(seconds=2), timedelta(minutes=1), 4)
HEALTH = _retried(timedelta(minutes=5), timedelta(seconds=2), timedelta(minutes=1), 5)
# Reading back the weights at the end: Route 53 may answer slowly; retried, heartbeating.
READ = _retried(timedelta(minutes=2), timedelta(seconds=1), timedelta(seconds=30), 10)
# Changes are never abandoned half way: a cancellation waits for the running change to finish.
CHANGE = ActivityCancellationType.WAIT_CANCELLATION_COMPLETED


def cause(err: BaseException) -> BaseException:
    """What an activity's failure says (its ApplicationError), not the wrapper around it."""
    if isinstance(err, ActivityError) and err.cause is not None:
        return err.cause
    return err


def text(err: BaseException) -> str:
    """An error's own message, without the `Type: ` prefix ApplicationError adds."""
    c = cause(err)
    return c.message if isinstance(c, ApplicationError) else str(c)


def refused(err: BaseException) -> bool:
    """Whether an activity refused (REFUSED: it changed nothing, and says why)."""
    c = cause(err)
    return isinstance(c, ApplicationError) and c.type == REFUSED
