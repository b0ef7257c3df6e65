"""Timeouts and retry policies for every activity call, in one place.

Heartbeat timeouts are seconds, not minutes: they decide how soon another worker takes over an activity
whose worker died (goal: within 30 s, see benchmarks/failover.py). The activities heartbeat every few
seconds while they run (activities/heartbeat.py); the SDK sends at most one heartbeat per 0.8 × the
heartbeat timeout. Start-to-close timeouts stay the outer bound of one attempt."""

from datetime import timedelta
from typing import TypedDict

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.workflow import ContinueAsNewVersioningBehavior

NON_RETRYABLE = ["InvalidRequest"]


class ActivityOptions(TypedDict, total=False):
    """The keyword arguments of `workflow.execute_activity*` that Bifrost sets; typed so calls stay checked."""

    start_to_close_timeout: timedelta
    schedule_to_close_timeout: timedelta
    heartbeat_timeout: timedelta
    retry_policy: RetryPolicy


class LocalActivityOptions(TypedDict, total=False):
    """The same for local activities (no heartbeats)."""

    start_to_close_timeout: timedelta
    retry_policy: RetryPolicy


# A quick read (versions, lock requests); as a local activity it costs no extra server round trip.
QUICK_LOCAL = LocalActivityOptions(
    start_to_close_timeout=timedelta(seconds=60),
    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30),
                             maximum_attempts=5, non_retryable_error_types=NON_RETRYABLE),
)
# No heartbeats (a few RPCs): a short start-to-close is what bounds the wait when its worker dies.
QUICK = ActivityOptions(
    start_to_close_timeout=timedelta(seconds=20),
    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30),
                             maximum_attempts=5, non_retryable_error_types=NON_RETRYABLE),
)
HEARTBEAT = timedelta(seconds=15)

# Retried every second at first, then every 10 s, until the option set's schedule-to-close: the looks and signals
# whose options below name it (a lock re-check, a release lookup, a signal across namespaces, a reaper's look).
STEADY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10),
                     non_retryable_error_types=NON_RETRYABLE)

# Confirming an internal signal with its sender's own state (a query; activities/peers.py). Retried for a
# while: a real grant or release that cannot be confirmed would leave a rollout or the lock waiting. Never a
# local activity: one keeps its workflow's task open while it runs, a query to that workflow waits for the
# open task, and two workflows confirming with each other at once stalled each other until their tasks timed out.
CONFIRM = ActivityOptions(
    start_to_close_timeout=timedelta(seconds=45),
    schedule_to_close_timeout=timedelta(minutes=15),
    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30),
                             non_retryable_error_types=NON_RETRYABLE),
)
# A queued rollout re-checking the lock's state itself (a grant whose signal was lost or could not be confirmed):
# short, since an abort waits for it, and a check that fails is simply made again at the next interval.
RECHECK = ActivityOptions(
    start_to_close_timeout=timedelta(seconds=45),
    schedule_to_close_timeout=timedelta(minutes=1),
    retry_policy=STEADY,
)
# Finding the release a revert undoes (a visibility list and one history): retried while a rollout that gave the lock
# back is still ending, for a bounded while.
RELEASE = ActivityOptions(
    start_to_close_timeout=timedelta(seconds=60),
    schedule_to_close_timeout=timedelta(minutes=10),
    retry_policy=STEADY,
)

# A signal to a workflow in the other namespace (rollout <-> stage, holder <-> lock), sent without waiting through
# the outbox: a signal cannot cross namespaces as a command, so an activity sends it. Retried for a while; a
# signal that never arrives is healed as a lost one is (each side re-checks the other's own state).
SIGNAL = ActivityOptions(
    start_to_close_timeout=timedelta(seconds=20),
    schedule_to_close_timeout=timedelta(minutes=10),
    retry_policy=STEADY,
)
# A stage reading its rollout's history for the Nexus operation that started it (workflows/stage/origin.py):
# retried while that operation is scheduled but its start is not recorded yet, for a bounded while.
ORIGIN = ActivityOptions(
    start_to_close_timeout=timedelta(seconds=30),
    schedule_to_close_timeout=timedelta(minutes=2),
    retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200), backoff_coefficient=1.5,
                             maximum_interval=timedelta(seconds=5), non_retryable_error_types=NON_RETRYABLE),
)
# A stage asking whether its rollout's run is still open (the reaper of workflows/stage/origin.py): a look that
# fails is simply made again at the next interval.
WATCH = ActivityOptions(
    start_to_close_timeout=timedelta(seconds=20),
    schedule_to_close_timeout=timedelta(minutes=1),
    retry_policy=STEADY,
)

DEPLOY = ActivityOptions(
    start_to_close_timeout=timedelta(minutes=15),
    heartbeat_timeout=HEARTBEAT,
    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=2), maximum_interval=timedelta(minutes=1),
                             maximum_attempts=4, non_retryable_error_types=NON_RETRYABLE),
)
# A rollback must finish: retry for up to an hour before giving up and reporting the stage as failed.
ROLLBACK = ActivityOptions(
    start_to_close_timeout=timedelta(minutes=15),
    schedule_to_close_timeout=timedelta(hours=1),
    heartbeat_timeout=HEARTBEAT,
    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=2), maximum_interval=timedelta(minutes=2),
                             non_retryable_error_types=NON_RETRYABLE),
)
# A canary step's weights (canary.traffic): one compare-and-set router call, retried a few times (a retry that finds
# its own write returns it). Withdrawing the canary (weight 0) must happen: retried for up to an hour, quickly.
ROUTE = ActivityOptions(
    start_to_close_timeout=timedelta(seconds=60),
    heartbeat_timeout=HEARTBEAT,
    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30),
                             maximum_attempts=5, non_retryable_error_types=NON_RETRYABLE),
)
WITHDRAW = ActivityOptions(
    start_to_close_timeout=timedelta(seconds=60),
    schedule_to_close_timeout=timedelta(hours=1),
    heartbeat_timeout=HEARTBEAT,
    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30),
                             non_retryable_error_types=NON_RETRYABLE),
)
ANALYSIS = ActivityOptions(
    start_to_close_timeout=timedelta(minutes=5),
    heartbeat_timeout=HEARTBEAT,
    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=2), maximum_interval=timedelta(minutes=1),
                             maximum_attempts=5, non_retryable_error_types=NON_RETRYABLE),
)
# Drawing a report is off the critical path (a ReportWorkflow the stage does not wait for runs it, on its own
# task queue); a report that cannot be drawn never changes a verdict.
REPORT = ActivityOptions(
    start_to_close_timeout=timedelta(minutes=5),
    heartbeat_timeout=HEARTBEAT,
    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=2), maximum_interval=timedelta(seconds=30),
                             maximum_attempts=3, non_retryable_error_types=NON_RETRYABLE),
)
NOTIFY = ActivityOptions(
    start_to_close_timeout=timedelta(seconds=30),
    retry_policy=RetryPolicy(maximum_attempts=2),
)

# Exceptions that mean a bug in workflow code. They fail the workflow run (which then reports what it
# knows) instead of failing its workflow task, which Temporal would retry forever — a wedged rollout would
# hold its service's lock. Nondeterminism errors are left out on purpose: a worker with the right code can
# still resume those runs.
FAIL_ON_BUGS: list[type[BaseException]] = [
    ArithmeticError, AssertionError, AttributeError, LookupError, NameError, NotImplementedError, TypeError, ValueError,
]


# -- Worker Versioning (docs/versioning.md) ---------------------------------------------------------------------
# Every workflow runs PINNED to the build that started it (the versioned worker's default, worker/versioning.py; a
# definition may not name a behaviour, or unversioned workers such as the tests' refuse its tasks): a rollout, its
# stages and everything it starts finish on the code they began with, so a new build never replays an old build's
# history. The two long-lived ones (the region guard, the service lock) stay pinned within a run and move to the
# current build when they continue as new.


def build_changed() -> bool:
    """The deployment's current build is no longer the one this pinned run is on (never, on an unversioned worker):
    a long-lived workflow continues as new at its next safe point, so the old build can drain. Read from the
    workflow task's own event, so a replay sees the same answer."""
    return workflow.info().is_target_worker_deployment_version_changed()


def upgrade_on_continue_as_new() -> ContinueAsNewVersioningBehavior | None:
    """At a continue-as-new: start the next run on the deployment's current build when it is no longer this run's
    (AUTO_UPGRADE for its first task; the run is pinned again after it); None, inherit, when nothing changed or
    the worker is unversioned."""
    if build_changed():
        return ContinueAsNewVersioningBehavior.AUTO_UPGRADE
    return None
