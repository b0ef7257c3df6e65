"""The service lock's contract: who asks for it and the state it keeps, shared by the lock workflow and the
activity that reaches it (signal-with-start), which may not import each other."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from common.types import ConcurrencyPolicy

LOCK_WORKFLOW = "ServiceLockWorkflow"
ACQUIRE_SIGNAL = "acquire"
LOCK_STATE_QUERY = "lock_state"  # the lock's own account: holder, queue, whom it refused or superseded
LOCK_CLAIM_QUERY = "__bifrost_lock_claim"  # a rollout's own account of its lock request; `__` lists it after status and summary in the UI
DROPPED_KEPT = 50  # how many refusals and supersessions the lock remembers (rollouts confirm theirs against it)
HOLDER_CHECK_SECONDS = 600.0  # how often a held lock checks that its holder still runs
MAX_HOLDER_CHECK_SECONDS = 86_400.0


class LockRequest(BaseModel):
    """A rollout asking for its service's lock, with the policy of its request."""

    model_config = ConfigDict(strict=True)

    workflow_id: str = Field(min_length=1, max_length=1000)
    service: str = Field(min_length=1, max_length=50)
    version: str = Field(min_length=1, max_length=128)
    policy: ConcurrencyPolicy = "queue"


class LockState(BaseModel):
    """Everything the lock workflow carries across continue-as-new: holder, queue and its log.

    Strict and bounded: the lock's input may be typed into the UI's Start Workflow like any other."""

    model_config = ConfigDict(strict=True, allow_inf_nan=False)

    service: str = Field(min_length=1, max_length=50, pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
    holder: LockRequest | None = None
    queue: list[LockRequest] = Field(default_factory=list)
    log: list[str] = Field(default_factory=list)
    refused: dict[str, str] = Field(default_factory=dict, description="rollout id -> why the lock refused it")
    superseded: dict[str, str] = Field(default_factory=dict, description="rollout id -> the version that superseded it")
    holder_check_seconds: float = Field(default=HOLDER_CHECK_SECONDS, gt=0, le=MAX_HOLDER_CHECK_SECONDS)


# What a lock may be started with; every other field of LockState only the lock itself writes (workflows/parentage.py).
START_FIELDS = frozenset({"service", "holder_check_seconds"})


def own_fields_given(state: LockState) -> list[str]:
    """The fields of `state` that only the lock itself writes (holder, queue, log, refused, superseded) and that are
    not empty: a start input carrying any of them was not made by Bifrost."""
    return [name for name, field in LockState.model_fields.items()
            if name not in START_FIELDS and getattr(state, name) != field.get_default(call_default_factory=True)]


def lock_id(service: str) -> str:
    """The lock workflow's id: one per service."""
    return f"service-lock/{service}"


class LockClaim(BaseModel):
    """A rollout's own account of its lock request (its `lock_claim` query): the lock confirms an `acquire` or
    a `release` signal against it, since anyone may send those signals by hand."""

    request: LockRequest
    status: Literal["none", "waiting", "granted", "refused", "released"]


RECOVER_MAX_RUNS = 100  # runs a fresh lock asks for their claims; more would not fit one activity (ordered oldest first)
CLAIMANT_TYPES = ("RolloutWorkflow", "RevertWorkflow")  # the workflows that take a service's lock


class RecoveredClaims(BaseModel):
    """What a fresh lock found by asking its service's running rollouts and reverts for their own claims: who holds
    the lock (by its own word), who waits (oldest first), and the runs that could not be asked (`skipped`: why)."""

    holders: list[LockRequest] = Field(default_factory=list)
    waiting: list[LockRequest] = Field(default_factory=list)
    skipped: list[str] = Field(default_factory=list)


def standing(state: LockState, workflow_id: str) -> str:
    """Where `workflow_id` stands in the lock's state (holder, its place in the queue), for an audit line."""
    holder = state.holder.workflow_id if state.holder is not None else "nobody"
    queued = [q.workflow_id for q in state.queue]
    where = "it holds the lock" if holder == workflow_id else (
        f"it is number {queued.index(workflow_id) + 1} in the queue" if workflow_id in queued else "it is not queued")
    return f"{where}; holder {holder}"
