"""How one metric is judged: the one metric definition the request, the traffic plan, the adapters and the judge share.

Pure pydantic, so `common/traffic` can carry a region's health metrics without importing the judge.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from common.types import Direction, EffectMeasure, MetricKind, NanStrategy, OutlierPolicy


class MetricSpec(BaseModel):
    """How one metric is judged. `direction` says which change is bad."""

    model_config = ConfigDict(extra="forbid", strict=True)  # typed by people: `true` is not a number, "5" not an int

    name: str = Field(min_length=1, pattern=r"^[A-Za-z_][A-Za-z0-9_.:-]*$")
    kind: MetricKind = "other"
    groups: list[str] = Field(default_factory=list)
    direction: Direction = "increase"
    critical: bool = False
    must_have_data: bool = False
    muted: bool = False
    nan_strategy: NanStrategy = "remove"
    outliers: OutlierPolicy = "keep"
    effect_size: EffectMeasure = "mean_ratio"
    allowed_increase: float | None = Field(default=None, gt=0)
    allowed_decrease: float | None = Field(default=None, gt=0)
    critical_increase: float | None = Field(default=None, gt=0)
    critical_decrease: float | None = Field(default=None, gt=0)
