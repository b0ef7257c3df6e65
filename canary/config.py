"""Metric and judge settings: the contract between a rollout request and the judge.

Pure pydantic, no I/O, so the same models validate a request file, a `bifrost judge` input and an
activity payload.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from canary.histogram import Histogram
from common.metric_spec import MetricSpec as MetricSpec  # shared vocabulary: the request and the traffic plan name metrics too
from common.types import Classification, Direction, EffectMeasure, JudgeMode, MetricKind, Verdict

DEFAULT_TOLERANCE: dict[MetricKind, float] = {"latency": 0.03}  # 3% for latency; none for other kinds


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # typed by people: `true` is not a number, "5" not an int


class Thresholds(_Strict):
    """Score thresholds: at or above `pass_` passes, at or above `marginal` is marginal."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)

    pass_: float = Field(default=95.0, alias="pass", ge=0, le=100)
    marginal: float = Field(default=75.0, ge=0, le=100)

    @model_validator(mode="after")
    def _ordered(self) -> "Thresholds":
        if self.marginal > self.pass_:
            raise ValueError(f"marginal ({self.marginal}) must not exceed pass ({self.pass_})")
        return self


class JudgeConfig(_Strict):
    """Judge-wide settings: mode, score thresholds, group weights, minimum samples per side."""

    mode: JudgeMode = "bifrost"
    thresholds: Thresholds = Field(default_factory=Thresholds)
    groups: dict[str, float] = Field(default_factory=dict, description="metric group weights (0-100, summing to <= 100)")
    min_samples: int = Field(default=20, ge=1, description="fewer samples per side is 'insufficient data', never a pass")
    alpha: float = Field(
        default=0.01, gt=0, lt=0.5,
        description="bifrost mode: false-alarm rate per analysis (and per soak) when the stage's place in the rollout is unknown",
    )
    rollout_alpha: float = Field(
        default=0.004, gt=0, lt=0.5,
        description="bifrost mode: chance that a good release is rolled back anywhere in the rollout, split across its stages",
    )
    max_extensions: int = Field(
        default=2, ge=0, le=10,
        description="bifrost mode: how many times an inconclusive analysis may extend its window (0: judge once)",
    )
    extend_below: float = Field(
        default=0.1, gt=0, le=1,
        description="bifrost mode: an analysis extends (not passes) while a metric's p-value times the number of metrics is below this",
    )

    tolerance: dict[MetricKind, float] = Field(
        default_factory=lambda: dict(DEFAULT_TOLERANCE),
        description="bifrost mode: per metric kind, a relative change below which a shift is no regression even when "
                    "significant (an equivalence margin: the tests compare with the baseline x (1 + tolerance))",
    )

    @field_validator("tolerance")
    @classmethod
    def _tolerances(cls, v: dict[MetricKind, float]) -> dict[MetricKind, float]:
        bad = [f"{k}={t:g}" for k, t in v.items() if not 0 <= t < 1]
        if bad:
            raise ValueError(f"tolerances must be at least 0 and below 1 (a fraction: 0.03 is 3%); got {', '.join(bad)}")
        return v

    @field_validator("groups")
    @classmethod
    def _weights(cls, v: dict[str, float]) -> dict[str, float]:
        bad = [f"{k}={w:g}" for k, w in v.items() if not 0 <= w <= 100]
        if bad:
            raise ValueError(f"group weights must be between 0 and 100; got {', '.join(bad)}")
        if sum(v.values()) > 100 + 1e-9:
            raise ValueError(f"group weights must add up to at most 100; got {sum(v.values()):g}")
        return v


class MetricSamples(_Strict):
    """Observed samples of one metric for the baseline and the canary over one window."""

    model_config = ConfigDict(extra="forbid")  # measured, not typed: Kayenta-style "NaN" strings are samples

    name: str
    baseline: list[float]
    canary: list[float]
    baseline_buckets: Histogram | None = Field(
        default=None, description="a latency's request counts per bucket and interval for the baseline (e.g. Prometheus "
                                  "`_bucket` series): the judge then also compares the tails request by request")
    canary_buckets: Histogram | None = Field(default=None, description="the same for the canary, with the same bounds")

    @model_validator(mode="after")
    def _buckets_paired(self) -> "MetricSamples":
        problem = bucket_problem(self.baseline_buckets, self.canary_buckets)
        if problem:
            raise ValueError(problem)
        return self


def bucket_problem(baseline: Histogram | None, canary: Histogram | None) -> str | None:
    """Why two arms' buckets cannot be compared (naming the field), or None: both arms or neither, same bounds."""
    if (baseline is None) != (canary is None):
        missing = "canary_buckets" if canary is None else "baseline_buckets"
        return f"{missing}: needed as well (buckets are compared arm with arm, so both arms or neither)"
    if baseline is not None and canary is not None and baseline.le != canary.le:
        return "canary_buckets.le: differs from baseline_buckets.le; both arms need the same bucket bounds"
    return None


class MetricResult(BaseModel):
    """The judge's finding for one metric, with everything a release manager needs to read it."""

    name: str
    classification: Classification
    critical: bool = False
    p_value: float | None = None
    interval: tuple[float, float] | None = None
    estimate: float | None = None
    effect_size: float | None = None
    baseline_n: int = 0
    canary_n: int = 0
    baseline_mean: float | None = None
    canary_mean: float | None = None
    reason: str = ""
    direction: Direction | None = None
    muted: bool = False
    groups: list[str] = Field(default_factory=list)
    effect_measure: EffectMeasure | None = None
    interval_level: float | None = Field(default=None, description="confidence level of `interval`")
    threshold: float | None = Field(default=None, description="the level the p-value was compared with")
    tests: dict[str, float] = Field(default_factory=dict, description="p-values of the component tests")
    tolerance: float | None = Field(default=None, description="the practical tolerance the tests allowed (0.03: 3%)")


class JudgeResult(BaseModel):
    """The verdict of one analysis: score 0-100, verdict, and one result per metric."""

    score: float
    verdict: Verdict
    metrics: list[MetricResult]
    summary: str
    mode: JudgeMode = "bifrost"
    group_scores: dict[str, float] = Field(default_factory=dict)


class StagePlace(_Strict):
    """Where an analysis sits in its rollout: stage `index` (0-based) of `stages`; the error budget is split by it."""

    index: int = Field(ge=0)
    stages: int = Field(ge=1, le=1000)

    @model_validator(mode="after")
    def _inside(self) -> "StagePlace":
        if self.index >= self.stages:
            raise ValueError(f"index: stage {self.index} is outside a rollout of {self.stages} stages (0-based)")
        return self


class Decision(BaseModel):
    """What to do with the canary after one look at its samples: pass, fail, or extend by `more_samples`."""

    action: Literal["pass", "fail", "extend"]
    result: JudgeResult
    look: int = Field(ge=1, description="1 for the first analysis, 2 after one extension, ...")
    max_looks: int = Field(ge=1)
    level: float | None = Field(default=None, description="the false-alarm level spent at this look (bifrost mode)")
    more_samples: int = Field(default=0, ge=0, description="for 'extend': fresh samples per side to gather first")
    inconclusive: list[str] = Field(default_factory=list, description="for 'extend': the metrics that need more data")
    reason: str = ""


class MonitorResult(BaseModel):
    """One look of the soak monitor: whether to raise the alarm, and why."""

    alarm: bool
    look: int
    max_looks: int
    reasons: list[str] = Field(default_factory=list)
    metrics: list[MetricResult] = Field(default_factory=list)
    summary: str = ""
