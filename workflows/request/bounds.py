"""The bounds every value of a request is checked against (docs/request.md states each one and why), and the
strict model every part of the request is built on."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict

from common.text import MAX_IDENTITY
from common.types import REGION_NAME

NAME_PATTERN = rf"^{REGION_NAME}$"  # a DNS-1123 label: Kubernetes object names, our region names
Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WEEKDAYS: tuple[Weekday, ...] = ("mon", "tue", "wed", "thu", "fri")

# Bounds (docs/request.md states each one and why)
MAX_ANALYSIS_MINUTES = 1440.0  # 24 h
MAX_INTERVAL_SECONDS = 3600
MAX_SAMPLES = 11_000  # Prometheus refuses a range query of more than 11,000 points per series
MAX_SOAK_HOURS = 336.0  # 14 days
MIN_LOOK_MINUTES = 1 / 60  # one second
MAX_LOOK_MINUTES = 1440.0
MAX_LOOKS = 20_160  # 14 days of one-minute looks
MAX_APPROVAL_HOURS = 720.0  # 30 days
MAX_REPLICAS = 1000
MAX_METRICS = 50
MAX_PARALLEL = 64
MAX_WAVE = 1000
MAX_TEXT = 2000
MAX_WHO = MAX_IDENTITY
MAX_METRIC_NAME = 100
MAX_WORKFLOW_ID_BYTES = 1000  # Temporal's default limit on a workflow id
MIN_WINDOW = timedelta(minutes=1)  # workflow timers fire up to a second late; a window must outlast that
MAX_PAYLOAD_BYTES = 1 << 20  # the request as JSON; Temporal refuses payloads over 2 MB


class RequestModel(BaseModel):
    # strict: a person types these; `true`, "30" or a !!binary string is refused, never coerced (JSON payloads still
    # carry dates as ISO strings, which strict JSON validation accepts; files get `_iso_date` for the same)
    model_config = ConfigDict(extra="forbid", frozen=False, allow_inf_nan=False, strict=True)
