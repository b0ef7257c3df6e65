"""The deployment request: what a developer or CI asks Bifrost to roll out, and how carefully.

Loaded from YAML or JSON and validated before anything is deployed. Every error names the field
and says what is allowed. Field errors are reported together; checks across fields (traffic shares,
gates, groups) run once every field is valid.
"""

from __future__ import annotations

import json
import math
from datetime import date, time
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from canary.config import JudgeConfig, MetricSpec
from common.problems import FileProblems, validation_problems
from common.types import ENV_KINDS, ConcurrencyPolicy, EnvKind, RollbackScope, stage_key

_NAME = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"
Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WEEKDAYS: tuple[Weekday, ...] = ("mon", "tue", "wed", "thu", "fri")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class DeployWindow(_Model):
    """A weekly window in which a region may start a stage, in the region's IANA time zone."""

    days: list[Weekday] = Field(default_factory=lambda: list(WEEKDAYS))
    start: time = time(9, 0)
    end: time = time(17, 0)

    @model_validator(mode="after")
    def _start_before_end(self) -> "DeployWindow":
        if self.start >= self.end:
            raise ValueError(f"start ({self.start}) must be before end ({self.end}); windows do not cross midnight")
        return self


class Region(_Model):
    """One region, the environments Bifrost deploys there, and its share of production traffic."""

    name: str = Field(pattern=_NAME, description="region name, e.g. us-east-1")
    environments: list[EnvKind] = Field(default_factory=lambda: list(ENV_KINDS), min_length=1)
    traffic_share: float = Field(default=0.0, ge=0.0, le=1.0, description="fraction of production traffic")
    timezone: str = "UTC"
    windows: list[DeployWindow] = Field(default_factory=list, description="empty: any time")
    freeze_dates: list[date] = Field(default_factory=list)

    @field_validator("environments")
    @classmethod
    def _unique_envs(cls, v: list[EnvKind]) -> list[EnvKind]:
        if len(set(v)) != len(v):
            raise ValueError(f"environments must not repeat (got {v})")
        # test always precedes prod regardless of how they are written
        return sorted(v, key=lambda e: 0 if e == "test" else 1)

    @field_validator("timezone")
    @classmethod
    def _known_tz(cls, v: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown IANA time zone {v!r}; use names like 'Europe/Dublin' or 'UTC'") from None
        return v


class CanarySettings(_Model):
    """Canary analysis: which metrics to judge, for how long, and how strictly (`judge`)."""

    metrics: list[MetricSpec] = Field(min_length=1)
    analysis_minutes: float = Field(default=30.0, ge=0, description="how long canary and baseline run before judging")
    interval_seconds: int = Field(default=60, ge=1, description="one sample per metric per interval")
    canary_replicas: int = Field(default=1, ge=1)
    baseline_replicas: int = Field(default=1, ge=1)
    judge: JudgeConfig = Field(default_factory=JudgeConfig, description="mode, thresholds, group weights, min_samples, alpha")
    soak_check_minutes: float = Field(default=10.0, gt=0, description="how often metrics are checked during soak")

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


class SoakSettings(_Model):
    """Soak (bake) hours after promotion, per environment kind; fractions allowed."""

    test_hours: float = Field(default=1.0, ge=0)
    prod_hours: float = Field(default=4.0, ge=0)

    def hours(self, env: EnvKind) -> float:
        return self.test_hours if env == "test" else self.prod_hours


class BlastRadius(_Model):
    """Rules that bound how much of the fleet one wave may touch."""

    max_parallel_regions: int = Field(default=1, ge=1, description="regions touched by one wave")
    max_parallel_prod_regions: int = Field(default=1, ge=1, description="production regions touched by one wave")
    prod_traffic_caps: list[float] = Field(
        default_factory=lambda: [1.0],
        min_length=1,
        description="max production traffic share per production wave; the last entry applies to all later waves",
    )
    canary_region: str | None = Field(default=None, description="first production region; default: smallest share")

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


class ApprovalGate(_Model):
    """A manual approval before a stage (`region/env`) or before a wave (1-based) starts."""

    stage: str | None = Field(default=None, pattern=r"^[a-z0-9-]+/(test|prod)$")
    wave: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _one_target(self) -> "ApprovalGate":
        if (self.stage is None) == (self.wave is None):
            raise ValueError("give exactly one of 'stage' (e.g. 'eu-west-1/prod') or 'wave' (e.g. 2)")
        return self

    @property
    def key(self) -> str:
        return self.stage if self.stage is not None else f"wave-{self.wave}"


class Approvals(_Model):
    """Who may approve, which gates need approval, and what happens if nobody answers."""

    approvers: list[str] = Field(default_factory=list, description="allow-list; empty: anyone may approve")
    gates: list[ApprovalGate] = Field(default_factory=list)
    timeout_hours: float = Field(default=72.0, gt=0)
    on_timeout: Literal["reject"] = "reject"


class Change(_Model):
    """What the rollout ships: the commit and pull request, for the audit trail."""

    commit: str | None = None
    pr: str | None = None
    url: str | None = None
    description: str | None = None


class RolloutRequest(_Model):
    """A request to roll `service` out at `version` across `regions`, in order."""

    service: str = Field(pattern=_NAME, description="service name (lowercase, digits, dashes)")
    version: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
    artifact: str | None = Field(default=None, description="image or artifact reference; default: service:version")
    regions: list[Region] = Field(min_length=1)
    canary: CanarySettings
    soak: SoakSettings = Field(default_factory=SoakSettings)
    blast_radius: BlastRadius = Field(default_factory=BlastRadius)
    approvals: Approvals = Field(default_factory=Approvals)
    rollback_scope: RollbackScope = "all"
    on_conflict: ConcurrencyPolicy = Field(default="queue", description="when another version of the service is rolling out")
    requested_by: str = Field(min_length=1)
    change: Change = Field(default_factory=Change)

    @model_validator(mode="after")
    def _consistent(self) -> "RolloutRequest":
        names = [r.name for r in self.regions]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"regions: region names must be unique; repeated: {', '.join(dupes)}")
        prod = [r for r in self.regions if "prod" in r.environments]
        for r in self.regions:
            if "prod" not in r.environments and r.traffic_share > 0:
                raise ValueError(f"regions.{r.name}.traffic_share: a region without 'prod' carries no production traffic")
        if prod:
            total = sum(r.traffic_share for r in prod)
            if not math.isclose(total, 1.0, abs_tol=0.005):
                shares = ", ".join(f"{r.name}={r.traffic_share:g}" for r in prod)
                raise ValueError(
                    f"regions.traffic_share: production shares must add up to 1.0, got {total:g} ({shares})"
                )
            zero = [r.name for r in prod if r.traffic_share <= 0]
            if zero:
                raise ValueError(f"regions.traffic_share: production regions need a share > 0: {', '.join(zero)}")
        br = self.blast_radius
        if br.canary_region is not None and br.canary_region not in {r.name for r in prod}:
            raise ValueError(
                f"blast_radius.canary_region: {br.canary_region!r} is not a production region; "
                f"choose one of {', '.join(r.name for r in prod) or '(none)'}"
            )
        stages = {stage_key(r.name, e) for r in self.regions for e in r.environments}
        for i, gate in enumerate(self.approvals.gates):
            if gate.stage is not None and gate.stage not in stages:
                raise ValueError(f"approvals.gates[{i}].stage: {gate.stage!r} is not a stage of this rollout; stages: {', '.join(sorted(stages))}")
        groups = {g for m in self.canary.metrics for g in m.groups}
        unknown = sorted(set(self.canary.judge.groups) - groups)
        if unknown:
            raise ValueError(f"canary.judge.groups: weights given for groups no metric belongs to: {', '.join(unknown)}")
        return self

    @property
    def image(self) -> str:
        return self.artifact or f"{self.service}:{self.version}"

    @property
    def workflow_id(self) -> str:
        """Deterministic ID: a re-run of the same CI job attaches to the running rollout."""
        return f"rollout/{self.service}/{self.version}"


class RequestError(FileProblems):
    """A request file that cannot be used, with one line per problem naming the field."""

    what = "request"


def parse_request(data: object, source: str = "<request>") -> RolloutRequest:
    """Validate a decoded request; raise `RequestError` listing every problem by field."""
    if not isinstance(data, dict):
        raise RequestError(source, [f"(top level): expected a mapping of fields, got {type(data).__name__}"])
    try:
        return RolloutRequest.model_validate(data)
    except ValidationError as err:
        raise RequestError(source, validation_problems(err, "docs/request.md")) from None


def load_request(path: str | Path) -> RolloutRequest:
    """Read a YAML or JSON request file and validate it."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as err:
        raise RequestError(str(p), [f"cannot read file: {err.strerror}"]) from None
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as err:
        raise RequestError(str(p), [f"not valid {'JSON' if p.suffix == '.json' else 'YAML'}: {err}"]) from None
    return parse_request(data, str(p))
