"""Every Temporal failure type Bifrost raises on purpose, in one table, and every list of types derived from it.

Like httpx's one exception tree with one mapping table: a failure type is declared once here with what the
rest of Bifrost needs to know about it, and the lists the code uses (types whose message is already a line
for a human, types a retry policy must never retry, types that end a workflow for its user, adapter error
kinds) are read off the table, so none can forget a type. The adapters' exception tree
(`activities/adapters/base.py`) names its kind for each class from `AdapterErrorKind`, and
`tests/activities/test_failure_types.py` checks that every exception class and every `type=` Bifrost raises
is in the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

# The ApplicationError type of each adapter error class (see activities/adapters/base.py).
AdapterErrorKind = Literal["AdapterError", "DeployError", "MetricsError", "TrafficError", "NotifyError", "ReportError"]


@dataclass(frozen=True)
class FailureType:
    """What Bifrost knows about one failure type it raises."""

    own_line: bool = False  # its message is a complete line for a human: shown without a "Type: " prefix
    never_retry: bool = False  # a retry policy lists it as non-retryable, whatever the raiser said
    ends_workflow: bool = False  # a workflow ends with it on purpose: shown red in the UI, with no stack trace
    adapter: bool = False  # an adapter error kind, counted by kind in bifrost_adapter_errors_total


# A rollout or stage that did not reach its goal ends as a failure of the type naming its outcome (so the
# Temporal UI shows it red), with its state as the details. An aborted rollout (patch `aborted-ends-canceled`)
# ends Canceled instead, which carries no details: its final state is the run's memo under OUTCOME_MEMO, written
# by the workflow right before it ends (workflows/controls/ending.py), and read only from that upsert in the run's own history,
# never from a memo given at start (common/own_memo.py).
OUTCOME_MEMO = "bifrost_outcome"
OUTCOME_FAILURE_TYPES: dict[str, str] = {
    "rolled_back": "RolledBack", "rejected": "Rejected", "aborted": "Aborted", "failed": "Failed",
}
REFUSED = "Refused"  # an update's validator said no
INVALID_PAYLOAD = "InvalidPayload"  # a payload (workflow input, update argument) did not match its model
INVALID_REQUEST = "InvalidRequest"  # a request that cannot be planned (or a traffic change that cannot be done as asked)
EVACUATION_FAILED = "EvacuationFailed"  # an evacuation or restore that stopped part-way (its state says where)
TRAFFIC_CONFLICT = "TrafficConflict"  # someone else moved the weights: stop, do not fight
WORKER_SHUTTING_DOWN = "WorkerShuttingDown"  # a peer query given up as its worker stops: the next attempt asks again
ORIGIN_NOT_YET = "OriginNotRecordedYet"  # a stage's rollout has not recorded its start yet: the next attempt reads again

FAILURE_TYPES: dict[str, FailureType] = {
    # the adapters' errors: the message is the adapter's one line; whether to retry is each error's own call
    **{kind: FailureType(own_line=True, adapter=True) for kind in get_args(AdapterErrorKind)},
    INVALID_REQUEST: FailureType(own_line=True, never_retry=True, ends_workflow=True),
    TRAFFIC_CONFLICT: FailureType(never_retry=True),
    WORKER_SHUTTING_DOWN: FailureType(),  # retried by the activity: no flag applies
    ORIGIN_NOT_YET: FailureType(),  # retried by the activity: no flag applies
    **{outcome: FailureType(ends_workflow=True) for outcome in OUTCOME_FAILURE_TYPES.values()},
    REFUSED: FailureType(ends_workflow=True),
    INVALID_PAYLOAD: FailureType(ends_workflow=True),
    EVACUATION_FAILED: FailureType(ends_workflow=True),
}

OWN_LINE_TYPES: frozenset[str] = frozenset(t for t, f in FAILURE_TYPES.items() if f.own_line)
NON_RETRYABLE: tuple[str, ...] = tuple(t for t, f in FAILURE_TYPES.items() if f.never_retry)
USER_FACING_FAILURE_TYPES: frozenset[str] = frozenset(t for t, f in FAILURE_TYPES.items() if f.ends_workflow)
ADAPTER_ERROR_KINDS: frozenset[str] = frozenset(t for t, f in FAILURE_TYPES.items() if f.adapter)
