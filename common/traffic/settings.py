"""How a traffic change goes, modelled once: `TrafficChangeSettings`, the levels, the pre-warm headroom and the
health checks after each step, with one set of bounds. Every place that asks for a traffic change embeds it (a
request's `evacuation`, the region guard's and the drill's `evacuation`) or extends it (`EvacuationInput`);
each declares only its own defaults (a production stage samples every 60 s, a hand-started evacuation every 5 s).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from common.traffic.models import DEFAULT_STEPS, Headroom, HealthInterval, Steps
from common.traffic.plan import step_problems

MAX_SAMPLES = 10_000
MAX_HEALTH_CHECK_MINUTES = 1440.0  # the longest pre-shift window (24 h), as a canary's analysis
MAX_EXTRA_WAIT_SECONDS = 86_400  # a day past the TTL after each step; Route 53 TTLs are at most 2 days anyway

# A subclass that only sets its context's default re-declares a field with this type (its bounds and old name).
HealthCheckMinutes = Annotated[float, Field(
    ge=1 / 60, le=MAX_HEALTH_CHECK_MINUTES, validation_alias=AliasChoices("health_check_minutes", "health_baseline_minutes"),
    description="the pre-shift window each gaining region is judged against (a stage also watches the rolled-back "
                "version this long before traffic returns); once named health_baseline_minutes")]


class TrafficChangeSettings(BaseModel):
    """The steps of a traffic change and the health check after each: bounds that admit the demo's compressed
    time (1 s samples, 1 sample) as well as production's."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    steps: Steps = Field(default_factory=lambda: list(DEFAULT_STEPS))
    headroom: Headroom = 1.2
    health_check_minutes: HealthCheckMinutes = 10
    health_interval_seconds: HealthInterval = 5
    min_samples: int = Field(default=10, ge=1, le=MAX_SAMPLES,
                             description="samples per side a health check needs; each step waits for them")
    extra_wait_seconds: int = Field(default=0, ge=0, le=MAX_EXTRA_WAIT_SECONDS,
                                    description="wait this much longer than the TTL after each step")

    @model_validator(mode="before")
    @classmethod
    def _min_samples_from_judge(cls, data: Any) -> Any:
        """Inputs written before these settings gave the check's samples as `judge.min_samples`: take them from
        there (recorded histories still decode), and drop that judge where the model has none."""
        if not isinstance(data, dict) or "judge" not in data:
            return data
        data = dict(data)
        judge = data["judge"] if "judge" in cls.model_fields else data.pop("judge")
        samples = judge.get("min_samples") if isinstance(judge, dict) else getattr(judge, "min_samples", None)
        if "min_samples" not in data and samples is not None:
            data["min_samples"] = samples
        return data

    def problems(self, prefix: str = "") -> list[str]:
        """What is wrong across fields, one line each naming the field (under `prefix`, e.g. "evacuation.")."""
        return [prefix + p for p in step_problems(self.steps)]

    def step_wait_seconds(self, ttl_wait: int) -> int:
        """The wait after each step: the TTL (plus extra), and long enough for the check to get its samples."""
        return max(ttl_wait + self.extra_wait_seconds, self.min_samples * self.health_interval_seconds)


def lift(data: Any, into: str, names: dict[str, str]) -> Any:
    """Move settings an older input gave flat (`evacuation_min_samples`) into the embedded model (`evacuation`,
    as `min_samples`), so inputs written before still decode; keys already inside win."""
    if not isinstance(data, dict) or not any(old in data for old in names):
        return data
    data = dict(data)
    inner = data.get(into)
    inner = dict(inner) if isinstance(inner, dict) else inner.model_dump(by_alias=False) if isinstance(inner, BaseModel) else {}
    for old, new in names.items():
        if old in data:
            inner.setdefault(new, data.pop(old))
    data[into] = inner
    return data
