"""How carefully a rollout goes: the canary's analysis, soak, blast radius, approvals, and what it ships."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from canary.config import JudgeConfig, MetricSpec
from common.text import Identity
from common.traffic.canary import CanaryTraffic
from common.traffic.models import MAX_REGIONS
from common.types import EnvKind, StageKey
from workflows.request.bounds import (
    MAX_ANALYSIS_MINUTES,
    MAX_APPROVAL_HOURS,
    MAX_INTERVAL_SECONDS,
    MAX_LOOK_MINUTES,
    MAX_METRIC_NAME,
    MAX_METRICS,
    MAX_PARALLEL,
    MAX_REPLICAS,
    MAX_SAMPLES,
    MAX_SOAK_HOURS,
    MAX_TEXT,
    MAX_WAVE,
    MIN_LOOK_MINUTES,
    RequestModel,
)
from workflows.request.values import metric_bounds


class CanarySettings(RequestModel):
    """Canary analysis: which metrics to judge, for how long, and how strictly (`judge`)."""

    metrics: list[Annotated[MetricSpec, AfterValidator(metric_bounds)]] = Field(min_length=1, max_length=MAX_METRICS)
    analysis_minutes: float = Field(default=30.0, ge=0, le=MAX_ANALYSIS_MINUTES,
                                    description="how long canary and baseline run before judging")
    interval_seconds: int = Field(default=60, ge=1, le=MAX_INTERVAL_SECONDS, description="one sample per metric per interval")
    canary_replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    baseline_replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    judge: JudgeConfig = Field(default_factory=JudgeConfig, description="mode, thresholds, group weights, min_samples, alpha")
    soak_check_minutes: float = Field(default=10.0, description="how often metrics are checked during soak")
    traffic: CanaryTraffic | None = Field(default=None, description="exact canary shares in steps through a router, "
                                          "each step judged (docs/request.md); none: the canary gets what its replicas get")

    @field_validator("soak_check_minutes")
    @classmethod
    def _look_interval(cls, v: float) -> float:
        if not MIN_LOOK_MINUTES <= v <= MAX_LOOK_MINUTES:
            raise ValueError(f"a look every {v:g} min is out of range: give at least 1/60 min (one second) "
                             f"and at most {MAX_LOOK_MINUTES:g} min (24 h)")
        return v

    @field_validator("judge")
    @classmethod
    def _judge_groups(cls, v: JudgeConfig) -> JudgeConfig:
        if len(v.groups) > MAX_METRICS or any(len(g) > MAX_METRIC_NAME for g in v.groups):
            raise ValueError(f"groups: at most {MAX_METRICS} groups of at most {MAX_METRIC_NAME} characters each")
        return v

    @model_validator(mode="after")
    def _samples_fit(self) -> "CanarySettings":
        samples = self.analysis_minutes * 60 / self.interval_seconds
        if samples > MAX_SAMPLES:
            least = math.ceil(self.analysis_minutes * 60 / MAX_SAMPLES)
            raise ValueError(
                f"canary.analysis_minutes: {self.analysis_minutes:g} min at one sample every {self.interval_seconds} s "
                f"is {samples:.0f} samples per metric, more than the {MAX_SAMPLES} Prometheus returns in one query; "
                f"raise canary.interval_seconds to at least {least} or shorten the analysis"
            )
        return self

    @model_validator(mode="after")
    def _steps_judged(self) -> "CanarySettings":
        if self.traffic is not None and self.analysis_minutes <= 0:
            raise ValueError("canary.traffic: each step is judged on the samples of its own window, so weighted steps "
                             "need canary.analysis_minutes above 0")
        return self

    @model_validator(mode="before")
    @classmethod
    def _moved_fields(cls, data: object) -> object:
        """Name the new home of judge settings that used to sit directly under `canary`."""
        if isinstance(data, dict):
            moved = {"judge_mode": "judge.mode", "thresholds": "judge.thresholds", "groups": "judge.groups",
                     "min_samples": "judge.min_samples", "alpha": "judge.alpha"}
            old = [k for k in moved if k in data]
            if old:
                raise ValueError("; ".join(f"canary.{k} has moved to canary.{moved[k]}" for k in old))
        return data

    @field_validator("metrics")
    @classmethod
    def _unique_metrics(cls, v: list[MetricSpec]) -> list[MetricSpec]:
        names = [m.name for m in v]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"metric names must be unique; repeated: {', '.join(dupes)}")
        return v


class SoakSettings(RequestModel):
    """Soak (bake) hours after promotion, per environment kind; fractions allowed."""

    test_hours: float = Field(default=1.0, ge=0, le=MAX_SOAK_HOURS)
    prod_hours: float = Field(default=4.0, ge=0, le=MAX_SOAK_HOURS)

    def hours(self, env: EnvKind) -> float:
        return self.test_hours if env == "test" else self.prod_hours


class BlastRadius(RequestModel):
    """Rules that bound how much of the fleet one wave may touch."""

    max_parallel_regions: int = Field(default=1, ge=1, le=MAX_PARALLEL, description="regions touched by one wave")
    max_parallel_prod_regions: int = Field(default=1, ge=1, le=MAX_PARALLEL, description="production regions touched by one wave")
    prod_traffic_caps: list[float] = Field(
        default_factory=lambda: [1.0],
        min_length=1,
        max_length=MAX_REGIONS,
        description="max production traffic share per production wave; the last entry applies to all later waves",
    )
    canary_region: str | None = Field(default=None, max_length=63, description="first production region; default: smallest share")

    @field_validator("prod_traffic_caps")
    @classmethod
    def _caps(cls, v: list[float]) -> list[float]:
        for i, cap in enumerate(v):
            if not 0 < cap <= 1:
                raise ValueError(f"prod_traffic_caps[{i}] = {cap}: each cap must be a fraction in (0, 1]")
        for i in range(1, len(v)):
            if v[i] < v[i - 1]:
                raise ValueError(
                    f"prod_traffic_caps must not shrink (wave {i + 1} cap {v[i]} < wave {i} cap {v[i - 1]})"
                )
        return v


class ApprovalGate(RequestModel):
    """A manual approval before a stage (`region/env`) or before a wave (1-based) starts."""

    stage: StageKey | None = None
    wave: int | None = Field(default=None, ge=1, le=MAX_WAVE)

    @model_validator(mode="after")
    def _one_target(self) -> "ApprovalGate":
        if (self.stage is None) == (self.wave is None):
            raise ValueError("give exactly one of 'stage' (e.g. 'eu-west-1/prod') or 'wave' (e.g. 2)")
        return self

    @property
    def key(self) -> str:
        return self.stage if self.stage is not None else f"wave-{self.wave}"


class Approvals(RequestModel):
    """Who may approve, which gates need approval, and what happens if nobody answers."""

    approvers: list[Identity] = Field(
        default_factory=list, max_length=1000, description="who may approve, reject, skip a soak, override a window or resolve a hold; empty: anyone who may send updates")
    gates: list[ApprovalGate] = Field(default_factory=list, max_length=1000)
    timeout_hours: float = Field(default=72.0, gt=0, le=MAX_APPROVAL_HOURS)
    on_timeout: Literal["reject"] = "reject"
    remind_every_minutes: float | None = Field(
        default=None, gt=0, le=MAX_APPROVAL_HOURS * 60,
        description="while a gate waits, notify again at this interval; unset: only the first notice")
    max_reminders: int = Field(default=3, ge=0, le=100, description="at most this many reminders per gate")


class Change(RequestModel):
    """What the rollout ships: the commit and pull request, for the audit trail."""

    commit: str | None = Field(default=None, max_length=MAX_TEXT)
    pr: str | None = Field(default=None, max_length=MAX_TEXT)
    url: str | None = Field(default=None, max_length=MAX_TEXT)
    description: str | None = Field(default=None, max_length=MAX_TEXT)
