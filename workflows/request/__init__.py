"""The deployment request: what a developer or CI asks Bifrost to roll out, and how carefully.

Loaded from YAML or JSON and validated before anything is deployed. Every error names the field
and says what is allowed. Field errors are reported together; checks across fields (traffic shares,
gates, groups, soak looks) run once every field is valid.

Every value is bounded (docs/request.md lists the bounds), so that each duration becomes a workflow timer,
each name a Kubernetes object name and a Temporal workflow id, and the request a payload Temporal accepts.

One module per concern: `bounds` (the limits, the strict base model), `values` (single typed values: image
references, time zones, dates), `regions` (regions, windows, what a failing stage does), `settings` (canary,
soak, blast radius, approvals), `model` (RolloutRequest and its checks across fields), `holds` (holds that
promote on timeout), `load` (parsing a document or file). This package's names are the public ones; import them
from `workflows.request`.
"""

from __future__ import annotations

from workflows.request.bounds import (
    MAX_ANALYSIS_MINUTES,
    MAX_APPROVAL_HOURS,
    MAX_INTERVAL_SECONDS,
    MAX_LOOK_MINUTES,
    MAX_LOOKS,
    MAX_METRIC_NAME,
    MAX_METRICS,
    MAX_PARALLEL,
    MAX_PAYLOAD_BYTES,
    MAX_REPLICAS,
    MAX_SAMPLES,
    MAX_SOAK_HOURS,
    MAX_TEXT,
    MAX_WAVE,
    MAX_WHO,
    MAX_WORKFLOW_ID_BYTES,
    MIN_LOOK_MINUTES,
    MIN_WINDOW,
    NAME_PATTERN,
    WEEKDAYS,
    RequestModel,
    Weekday,
)
from workflows.request.holds import (
    duration,
    promote_hold_floor_problem,
    promote_on_timeout_warning,
    promoting_holds,
)
from workflows.request.load import (
    RequestError,
    load_request,
    parse_request,
)
from workflows.request.model import (
    RolloutRequest,
)
from workflows.request.regions import (
    EVACUATES,
    HOLDS,
    MAX_HOLD_MINUTES,
    DeployWindow,
    EvacuationSettings,
    HoldSettings,
    OnFailure,
    Region,
)
from workflows.request.settings import (
    ApprovalGate,
    Approvals,
    BlastRadius,
    CanarySettings,
    Change,
    SoakSettings,
)
from workflows.request.values import (
    CLOCK,
    IsoDate,
    TimeZone,
    image_reference_problem,
    known_time_zone,
    lone_surrogate,
    metric_bounds,
)

__all__ = [
    "ApprovalGate",
    "Approvals",
    "BlastRadius",
    "CLOCK",
    "CanarySettings",
    "Change",
    "DeployWindow",
    "EVACUATES",
    "EvacuationSettings",
    "HOLDS",
    "HoldSettings",
    "IsoDate",
    "MAX_ANALYSIS_MINUTES",
    "MAX_APPROVAL_HOURS",
    "MAX_HOLD_MINUTES",
    "MAX_INTERVAL_SECONDS",
    "MAX_LOOKS",
    "MAX_LOOK_MINUTES",
    "MAX_METRICS",
    "MAX_METRIC_NAME",
    "MAX_PARALLEL",
    "MAX_PAYLOAD_BYTES",
    "MAX_REPLICAS",
    "MAX_SAMPLES",
    "MAX_SOAK_HOURS",
    "MAX_TEXT",
    "MAX_WAVE",
    "MAX_WHO",
    "MAX_WORKFLOW_ID_BYTES",
    "MIN_LOOK_MINUTES",
    "MIN_WINDOW",
    "NAME_PATTERN",
    "OnFailure",
    "Region",
    "RequestError",
    "RequestModel",
    "RolloutRequest",
    "SoakSettings",
    "TimeZone",
    "WEEKDAYS",
    "Weekday",
    "duration",
    "image_reference_problem",
    "known_time_zone",
    "load_request",
    "lone_surrogate",
    "metric_bounds",
    "parse_request",
    "promote_hold_floor_problem",
    "promote_on_timeout_warning",
    "promoting_holds",
]
