"""The vocabulary every layer shares: environments, roles, statuses, judge labels, and a stage's address.

Written once here so the request model, the judge, the activities and the workflows cannot drift apart.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field

# Temporal failure types Bifrost raises on purpose: declared once, in common/failures.py (re-exported here).
from common.failures import EVACUATION_FAILED as EVACUATION_FAILED
from common.failures import INVALID_PAYLOAD as INVALID_PAYLOAD
from common.failures import INVALID_REQUEST as INVALID_REQUEST
from common.failures import OUTCOME_FAILURE_TYPES as OUTCOME_FAILURE_TYPES
from common.failures import REFUSED as REFUSED
from common.failures import USER_FACING_FAILURE_TYPES as USER_FACING_FAILURE_TYPES

# The status words and hold reasons: declared once, in common/vocabulary.py (re-exported here).
from common.vocabulary import ROLLOUT_TERMINAL
from common.vocabulary import HoldReason as HoldReason
from common.vocabulary import RolloutStatus as RolloutStatus
from common.vocabulary import StageStatus as StageStatus

# The most a person or a hand-sent call may put in one update's arguments, one signal's arguments or one workflow's
# start input (bytes of payload): Bifrost's own are at most a few KB (docs/security.md, "Bounded payloads"). The
# worker drops an update or signal over it before the workflow sees it and fails a start over it at once
# (worker/bounds.py); it does not bound activity results, query answers or reports, which may be larger.
MAX_SENT_PAYLOAD_BYTES = 64 * 1024

EnvKind = Literal["test", "prod"]
ENV_KINDS: tuple[EnvKind, ...] = ("test", "prod")
Role = Literal["primary", "canary", "baseline"]
RollbackScope = Literal["stage", "region", "all"]
ConcurrencyPolicy = Literal["queue", "supersede", "reject"]
TERMINAL = ROLLOUT_TERMINAL  # how a rollout ends (common/vocabulary.py)

JudgeMode = Literal["bifrost", "kayenta"]
Verdict = Literal["pass", "marginal", "fail", "insufficient_data"]
Classification = Literal["Pass", "High", "Low", "Nodata", "NodataFailMetric", "Error"]
REGRESSED: frozenset[str] = frozenset({"High", "Low", "NodataFailMetric"})
NO_VERDICT: frozenset[str] = frozenset({"Nodata", "Error"})
Direction = Literal["increase", "decrease", "either"]
MetricKind = Literal["latency", "error_rate", "saturation", "throughput", "other"]
EffectMeasure = Literal["mean_ratio", "cles"]
NanStrategy = Literal["remove", "replace"]
OutlierPolicy = Literal["keep", "remove"]


def stage_key(region: str, environment: str) -> str:
    """The one way a stage is written: `region/env`, e.g. `eu-west-1/prod`."""
    return f"{region}/{environment}"


REGION_NAME = r"[a-z0-9]([a-z0-9-]*[a-z0-9])?"  # a DNS-1123 label: Kubernetes object names, our region names
MAX_REGION_LEN = 63
# The platform's safety floor on `hold.timeout_minutes` when `hold.on_timeout` is promote: a canary held on failure
# is promoted by a timeout only after at least this long (the targets file's policy.min_promote_hold_minutes).
DEFAULT_PROMOTE_HOLD_FLOOR_MINUTES = 60.0
MAX_STAGE_KEY = MAX_REGION_LEN + 1 + max(len(e) for e in ENV_KINDS)
_STAGE_KEY = re.compile(rf"{REGION_NAME}/({'|'.join(ENV_KINDS)})", re.ASCII)


def is_stage_key(text: str) -> bool:
    """Whether `text` is written as a stage is (`stage_key`): a region name, '/', an environment."""
    return len(text) <= MAX_STAGE_KEY and _STAGE_KEY.fullmatch(text) is not None


def _check_stage_key(text: str) -> str:
    if not is_stage_key(text):
        shown = repr(text[:60] + ("…" if len(text) > 60 else ""))
        raise ValueError(f"{shown} is not a stage; write region/env, e.g. eu-west-1/prod")
    return text


# A stage named in a request or an update: the one rule (the request, the CLI and the updates use it).
StageKey = Annotated[str, Field(min_length=3, max_length=200, description="region/env, e.g. eu-west-1/prod"),
                     AfterValidator(_check_stage_key)]


class StageRef(BaseModel):
    """Which service, region and environment an adapter or activity acts on."""

    service: str
    region: str
    environment: EnvKind

    @property
    def key(self) -> str:
        return stage_key(self.region, self.environment)


class MetricWindow(BaseModel):
    """A time window sampled once per `interval_seconds`."""

    start: datetime
    end: datetime
    interval_seconds: int = 60


HoldKind = HoldReason  # what a notice says the workflow waits for: one of the hold reasons


class Notification(BaseModel):
    """A rollout or stage event for humans (chat webhooks); never fails a rollout.

    The fields after `stage` say what a person needs to act (built by `common.notices`); all are optional, so
    a notification recorded before they existed still decodes."""

    rollout_id: str
    service: str
    version: str
    event: str
    text: str
    stage: str | None = None
    hold: HoldKind | None = None  # the rollout waits for this: a resume, an approval, a window, the service lock
    wave: int | None = None
    stages: list[str] = []  # the stages held back or moved
    gates: list[str] = []
    approvers: list[str] = []  # who may approve (the request's allow-list); empty: anyone who may send updates
    reminder: int = 0  # 0: the first notice; n: the n-th reminder
    reminders_left: int | None = None
    until: datetime | None = None  # when the wait ends on its own: a window opens, an approval times out
    region: str | None = None  # traffic: the region moved
    weights: dict[str, int] = {}  # traffic: each region's weight after the move
    waits_for: str | None = None  # queued: the workflow (a rollout) it waits behind
    urgent: bool = False  # act now: a rollback, a failure hold, an automatic evacuation (common.notices.is_urgent)
    started_by: str | None = None  # traffic: the workflow that started the change (a rollout, the guard); None: a person
    requested_by: str | None = None  # traffic: who asked for it
    why: str | None = None  # traffic: the reason it was started with
    run_id: str | None = None  # the run of `rollout_id` the link opens, when sent from elsewhere (a stage: its rollout's)

