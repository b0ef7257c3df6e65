"""The deployment request: what a developer or CI asks Bifrost to roll out, and how carefully.

Loaded from YAML or JSON and validated before anything is deployed. Every error names the field
and says what is allowed. Field errors are reported together; checks across fields (traffic shares,
gates, groups, soak looks) run once every field is valid.

Every value is bounded (docs/request.md lists the bounds), so that each duration becomes a workflow timer,
each name a Kubernetes object name and a Temporal workflow id, and the request a payload Temporal accepts.
"""

from __future__ import annotations

import functools
import math
import re
from datetime import date, datetime, time, timedelta
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from canary.config import JudgeConfig, MetricSpec
from common.loading import load_document
from common.problems import FileProblems, show, validation_problems
from common.text import MAX_IDENTITY, Identity
from common.traffic.canary import CanaryTraffic
from common.traffic.models import MAX_REGIONS, MAX_SERVICE_LEN, HealthInterval
from common.traffic.plan import step_problems
from common.traffic.settings import HealthCheckMinutes, TrafficChangeSettings
from common.types import ENV_KINDS, REGION_NAME, ConcurrencyPolicy, EnvKind, RollbackScope, StageKey, stage_key

_NAME = rf"^{REGION_NAME}$"  # a DNS-1123 label: Kubernetes object names, our region names
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

# An OCI image reference: [registry[:port]/]path[:tag][@sha256:<64 hex>] (the distribution spec's grammar)
_DOMAIN_PART = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_DOMAIN = re.compile(rf"{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]{{1,5}})?", re.ASCII)
_PATH_PART = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*", re.ASCII)
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", re.ASCII)
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}", re.ASCII)
_CLOCK = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])(?::([0-5][0-9])(?:\.([0-9]{1,6}))?)?", re.ASCII)


def image_reference_problem(ref: str) -> str | None:
    """Why `ref` is not an OCI image reference, or None if it is one."""
    if ref != ref.strip():
        return "remove the spaces around it"
    if not ref:
        return "it is empty"
    if len(ref) > 512:
        return f"it is {len(ref)} characters long; image references are at most 512"
    odd = next((c for c in ref if not (c.isascii() and (c.isalnum() or c in "._-:/@"))), None)
    if odd is not None:
        return f"it contains {show(odd)}; image references have only letters, digits and . _ - : / @"
    rest, at, digest = ref.partition("@")
    if at and not _DIGEST.fullmatch(digest):
        return "the digest after '@' must be sha256: and 64 lowercase hex digits"
    parts = rest.split("/")
    first = parts[0]
    domain = len(parts) > 1 and ("." in first or ":" in first or first == "localhost")
    if domain:
        if not _DOMAIN.fullmatch(first):
            return f"{show(first)} is not a registry host[:port]"
        parts = parts[1:]
    last = parts[-1]
    tag = None
    if ":" in last:
        last, tag = last.split(":", 1)
        parts[-1] = last
    if tag is not None and not _TAG.fullmatch(tag):
        return "the tag after ':' must be letters, digits, '_', '.' or '-' (at most 128, not starting with '.' or '-')"
    for part in parts:
        if not _PATH_PART.fullmatch(part):
            if part.lower() != part and _PATH_PART.fullmatch(part.lower()):
                return f"the repository path must be lower case ({show(part)})"
            return (f"{show(part)} is not a repository path component: lower-case letters and digits, "
                    "separated by '.', '_', '__' or dashes")
    if len(rest) - (len(tag) + 1 if tag is not None else 0) > 255:
        return "the repository name is longer than 255 characters"
    return None


def _lone_surrogate(value: object, path: str) -> str | None:
    """The path of the first string (key or value) that cannot be written as UTF-8, else None."""
    if isinstance(value, str):
        return path or "(top level)" if any("\ud800" <= c <= "\udfff" for c in value) else None
    if isinstance(value, dict):
        for k, v in value.items():
            sub = f"{path}.{k}" if path else str(k)
            found = _lone_surrogate(k, sub) or _lone_surrogate(v, sub)
            if found:
                return found
    if isinstance(value, list | tuple):
        for i, v in enumerate(value):
            found = _lone_surrogate(v, f"{path}.{i}")
            if found:
                return found
    return None


@functools.cache
def _zones() -> frozenset[str]:
    from zoneinfo import available_timezones

    return frozenset(available_timezones()) | {"UTC"}


def known_time_zone(v: str) -> str:
    """An IANA zone name, checked by a set lookup: never a file opened by name ('Europe' is a tzdata
    directory, '../x' a path)."""
    if v not in _zones():
        raise ValueError(f"unknown IANA time zone {show(v)}; use names like 'Europe/Dublin' or 'UTC'")
    return v


TimeZone = Annotated[str, AfterValidator(known_time_zone)]


def _metric_bounds(m: MetricSpec) -> MetricSpec:
    """Bounds the judge's own model leaves open: name length, finite thresholds, a few groups."""
    if len(m.name) > MAX_METRIC_NAME:
        raise ValueError(f"name is {len(m.name)} characters long; at most {MAX_METRIC_NAME} are allowed")
    for field in ("allowed_increase", "allowed_decrease", "critical_increase", "critical_decrease"):
        value = getattr(m, field)
        if value is not None and not math.isfinite(value):
            raise ValueError(f"{field} must be a finite number (got {value})")
    if len(m.groups) > MAX_METRICS or any(len(g) > MAX_METRIC_NAME for g in m.groups):
        raise ValueError(f"groups: at most {MAX_METRICS} groups of at most {MAX_METRIC_NAME} characters each")
    return m


class _Model(BaseModel):
    # strict: a person types these; `true`, "30" or a !!binary string is refused, never coerced (JSON payloads still
    # carry dates as ISO strings, which strict JSON validation accepts; files get `_iso_date` for the same)
    model_config = ConfigDict(extra="forbid", frozen=False, allow_inf_nan=False, strict=True)


def _iso_date(v: object) -> object:
    """A date as YAML reads it (a date) or as JSON writes it ("2026-12-24"); nothing else (no numbers)."""
    if isinstance(v, str):
        if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", v):
            raise ValueError(f'expected a date "YYYY-MM-DD", got {show(v)}')
        try:
            return date.fromisoformat(v)
        except ValueError as err:
            raise ValueError(f"{show(v)} is not a date: {err}") from None
    if isinstance(v, datetime):
        raise ValueError(f"expected a date without a time, got {v.isoformat()}")
    return v


IsoDate = Annotated[date, BeforeValidator(_iso_date)]


class DeployWindow(_Model):
    """A weekly window in which a region may start a stage, in the region's IANA time zone."""

    days: list[Weekday] = Field(default_factory=lambda: list(WEEKDAYS), min_length=1, max_length=7)
    start: time = time(9, 0)
    end: time = time(17, 0)

    @field_validator("start", "end", mode="before")
    @classmethod
    def _local_clock(cls, v: object) -> object:
        """"HH:MM" (or "HH:MM:SS", as the request travels) in the region's time zone; nothing else."""
        if isinstance(v, time):
            if v.tzinfo is not None:
                raise ValueError(f"give a local time without a zone (got {v.isoformat()}); the region's timezone applies")
            return v
        if isinstance(v, bool) or isinstance(v, int | float):
            hint = ""
            if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 24 * 60:
                hint = f'; did you mean "{v // 60:02d}:{v % 60:02d}"? YAML reads an unquoted 9:00 as a number: quote it'
            raise ValueError(f'expected a local time "HH:MM" as a string, got the number {show(v)}{hint}')
        if isinstance(v, str):
            m = _CLOCK.fullmatch(v)
            if m is None:
                raise ValueError(f'expected a local time "HH:MM" from 00:00 to 23:59, without a zone (got {show(v)})')
            frac = (m.group(4) or "").ljust(6, "0")
            return time(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0), int(frac or 0))
        raise ValueError(f'expected a local time "HH:MM", got {type(v).__name__}')

    @model_validator(mode="after")
    def _start_before_end(self) -> "DeployWindow":
        if self.start >= self.end:
            raise ValueError(f"start ({self.start}) must be before end ({self.end}); windows do not cross midnight")
        length = datetime.combine(date.min, self.end) - datetime.combine(date.min, self.start)
        if length < MIN_WINDOW:
            raise ValueError(f"the window {self.start}-{self.end} is open for {length.total_seconds():g} s; a window "
                             f"must be open at least {MIN_WINDOW.total_seconds():g} s for a stage to start inside it")
        return self


OnFailure = Literal["rollback", "evacuate", "hold", "evacuate_and_hold"]
EVACUATES: frozenset[str] = frozenset({"evacuate", "evacuate_and_hold"})  # on_failure values that move traffic first
HOLDS: frozenset[str] = frozenset({"hold", "evacuate_and_hold"})  # on_failure values that hold for a person
MAX_HOLD_MINUTES = 14 * 24 * 60


class Region(_Model):
    """One region, the environments Bifrost deploys there, and its share of production traffic."""

    name: str = Field(pattern=_NAME, max_length=63, description="region name, e.g. us-east-1")
    environments: list[EnvKind] = Field(default_factory=lambda: list(ENV_KINDS), min_length=1)
    traffic_share: float = Field(default=0.0, ge=0.0, le=1.0, description="fraction of production traffic")
    timezone: TimeZone = "UTC"
    windows: list[DeployWindow] = Field(default_factory=list, max_length=50, description="empty: any time")
    freeze_dates: list[IsoDate] = Field(default_factory=list, max_length=1000)
    on_failure: OnFailure = Field(
        default="rollback",
        description="when a stage of the region fails: roll it back; evacuate its traffic first, roll back, then "
                    "restore the traffic (see `evacuation`); hold with canary and baseline running until a release "
                    "manager retries, promotes or rolls back (see `hold`); or evacuate_and_hold: move a failing prod "
                    "stage's traffic away, then hold")

    @field_validator("environments")
    @classmethod
    def _unique_envs(cls, v: list[EnvKind]) -> list[EnvKind]:
        if len(set(v)) != len(v):
            raise ValueError(f"environments must not repeat (got {v})")
        # test always precedes prod regardless of how they are written
        return sorted(v, key=lambda e: 0 if e == "test" else 1)


class HoldSettings(_Model):
    """How long a stage held on failure (`on_failure: hold`) waits for a release manager, and what happens then."""

    timeout_minutes: float = Field(default=24 * 60.0, ge=1 / 60, le=MAX_HOLD_MINUTES,
                                   description="how long a hold waits for resolve_hold (1 s to 14 days)")
    on_timeout: Literal["rollback", "promote"] = Field(
        default="rollback", description="what a hold that times out does: roll the stage back, or promote it")


class EvacuationSettings(TrafficChangeSettings):
    """How a failing production stage with `on_failure: evacuate` moves its region's traffic away and back: the
    one model of a traffic change's settings, with a production stage's defaults (samples a minute apart, a
    five-minute watch), its steps checked when the file loads."""

    health_check_minutes: HealthCheckMinutes = 5.0
    health_interval_seconds: HealthInterval = Field(
        default=60, description="sample spacing of the health checks; a step waits for min_samples")

    @field_validator("steps")
    @classmethod
    def _steps(cls, v: list[int]) -> list[int]:
        problems = step_problems(v)
        if problems:
            raise ValueError("; ".join(p.removeprefix("steps: ") for p in problems))
        return v


class CanarySettings(_Model):
    """Canary analysis: which metrics to judge, for how long, and how strictly (`judge`)."""

    metrics: list[Annotated[MetricSpec, AfterValidator(_metric_bounds)]] = Field(min_length=1, max_length=MAX_METRICS)
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


class SoakSettings(_Model):
    """Soak (bake) hours after promotion, per environment kind; fractions allowed."""

    test_hours: float = Field(default=1.0, ge=0, le=MAX_SOAK_HOURS)
    prod_hours: float = Field(default=4.0, ge=0, le=MAX_SOAK_HOURS)

    def hours(self, env: EnvKind) -> float:
        return self.test_hours if env == "test" else self.prod_hours


class BlastRadius(_Model):
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


class ApprovalGate(_Model):
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


class Approvals(_Model):
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


class Change(_Model):
    """What the rollout ships: the commit and pull request, for the audit trail."""

    commit: str | None = Field(default=None, max_length=MAX_TEXT)
    pr: str | None = Field(default=None, max_length=MAX_TEXT)
    url: str | None = Field(default=None, max_length=MAX_TEXT)
    description: str | None = Field(default=None, max_length=MAX_TEXT)


class RolloutRequest(_Model):
    """A request to roll `service` out at `version` across `regions`, in order."""

    service: str = Field(pattern=_NAME, min_length=1, max_length=MAX_SERVICE_LEN,
                         description="service name (lowercase, digits, dashes)")
    version: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
    artifact: str | None = Field(default=None, description="OCI image reference; default: service:version")
    regions: list[Region] = Field(min_length=1, max_length=MAX_REGIONS)
    canary: CanarySettings
    soak: SoakSettings = Field(default_factory=SoakSettings)
    blast_radius: BlastRadius = Field(default_factory=BlastRadius)
    approvals: Approvals = Field(default_factory=Approvals)
    rollback_scope: RollbackScope = "all"
    on_conflict: ConcurrencyPolicy = Field(default="queue", description="when another version of the service is rolling out")
    requested_by: Identity = Field(min_length=1)
    change: Change = Field(default_factory=Change)
    evacuation: EvacuationSettings = Field(default_factory=EvacuationSettings,
                                           description="for regions with on_failure: evacuate")
    hold: HoldSettings = Field(default_factory=HoldSettings,
                               description="for regions with on_failure: hold or evacuate_and_hold")
    traffic_recheck_seconds: int = Field(default=30, ge=1, le=3600,
                                         description="a wave whose regions' traffic is evacuated or moving holds, and "
                                                     "reads the traffic again this often (docs/traffic.md)")

    @field_validator("artifact")
    @classmethod
    def _image_reference(cls, v: str | None) -> str | None:
        if v is not None:
            problem = image_reference_problem(v)
            if problem:
                raise ValueError(f"not an OCI image reference ({problem}); expected "
                                 "[registry[:port]/]path[:tag][@sha256:<64 hex>], e.g. registry.example.com/payments:2.4.0")
        return v

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
            if "prod" not in r.environments and r.on_failure in EVACUATES:
                raise ValueError(f"regions.{r.name}.on_failure: only a production stage carries traffic to evacuate; "
                                 "add 'prod' to its environments or use on_failure: rollback (or hold)")
        if any(r.on_failure in EVACUATES for r in self.regions) and len(prod) < 2:
            raise ValueError("regions.on_failure: evacuate needs another production region to take the traffic")
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
        self._soak_looks_fit()
        where = _lone_surrogate(self.model_dump(), "")
        if where is not None:
            raise ValueError(f"{where}: contains a lone surrogate (an escape such as \\udcff), which is not Unicode text; "
                             "remove it")
        longest = max((stage_key(r.name, e) for r in self.regions for e in r.environments), key=len)
        if len(f"{self.workflow_id}/{longest}".encode()) >= MAX_WORKFLOW_ID_BYTES:
            raise ValueError(f"service: the stage workflow id {self.workflow_id}/{longest} would exceed Temporal's "
                             f"{MAX_WORKFLOW_ID_BYTES}-byte limit; shorten the service, version or region names")
        return self

    def _soak_looks_fit(self) -> None:
        """Every non-zero soak is at least one look interval long and needs at most MAX_LOOKS looks."""
        look = self.canary.soak_check_minutes
        used = {e for r in self.regions for e in r.environments}
        for env in ENV_KINDS:
            hours = self.soak.hours(env)
            if hours <= 0 or env not in used:
                continue
            field = f"soak.{env}_hours"
            if look > hours * 60:
                raise ValueError(
                    f"canary.soak_check_minutes: a look every {look:g} min is longer than {field} ({hours:g} h = "
                    f"{hours * 60:g} min); set canary.soak_check_minutes to at most {hours * 60:g} or lengthen the soak"
                )
            looks = math.ceil(hours * 60 / look - 1e-9)
            if looks > MAX_LOOKS:
                least = hours * 60 / MAX_LOOKS
                raise ValueError(
                    f"canary.soak_check_minutes: a look every {look:g} min over {field} ({hours:g} h) is {looks} looks, "
                    f"more than {MAX_LOOKS}; raise canary.soak_check_minutes to at least {least:.3g}"
                )

    @property
    def image(self) -> str:
        return self.artifact or f"{self.service}:{self.version}"

    @property
    def workflow_id(self) -> str:
        """Deterministic ID: a re-run of the same CI job attaches to the running rollout."""
        return f"rollout/{self.service}/{self.version}"


def promoting_holds(req: RolloutRequest) -> list[str]:
    """The regions whose failed stages hold and are promoted if the hold times out (hold.on_timeout: promote)."""
    if req.hold.on_timeout != "promote":
        return []
    return [r.name for r in req.regions if r.on_failure in HOLDS]


def duration(minutes: float) -> str:
    """A duration given in minutes, as people read it: 1 s, 90 s, 45 min, 2 h."""
    if minutes < 2:
        return f"{minutes * 60:.4g} s"
    if minutes < 120:
        return f"{minutes:.4g} min"
    return f"{minutes / 60:.4g} h"


def promote_hold_floor_problem(req: RolloutRequest, floor_minutes: float) -> str | None:
    """Why the request's holds may not promote on timeout this soon (None: they may). `floor_minutes` is the
    platform's (the worker's targets file, policy.min_promote_hold_minutes), never the request's."""
    regions = promoting_holds(req)
    if not regions or req.hold.timeout_minutes >= floor_minutes:
        return None
    return (f"hold.timeout_minutes: {req.hold.timeout_minutes:g} ({duration(req.hold.timeout_minutes)}) is shorter than "
            f"the platform's floor of {floor_minutes:g} ({duration(floor_minutes)}) for hold.on_timeout: promote, which "
            f"would promote a failed canary of {', '.join(regions)} when nobody decides in time; give at least "
            f"{floor_minutes:g}, or on_timeout: rollback (policy.min_promote_hold_minutes in the targets file sets the floor)")


def promote_on_timeout_warning(req: RolloutRequest) -> str | None:
    """The loud line `bifrost plan` and `submit` print when a hold promotes on timeout (None: none does)."""
    regions = promoting_holds(req)
    if not regions:
        return None
    return (f"WARNING: hold.on_timeout is promote: a FAILED canary of {', '.join(regions)} that holds is PROMOTED if "
            f"nobody decides within {duration(req.hold.timeout_minutes)} (hold.timeout_minutes)")


class RequestError(FileProblems):
    """A request file that cannot be used, with one line per problem naming the field."""

    what = "request"


def parse_request(data: object, source: str = "<request>") -> RolloutRequest:
    """Validate a decoded request; raise `RequestError` listing every problem by field."""
    if not isinstance(data, dict):
        raise RequestError(source, [f"(top level): expected a mapping of fields, got {type(data).__name__}"])
    try:
        req = RolloutRequest.model_validate(data)
    except ValidationError as err:
        raise RequestError(source, validation_problems(err, "docs/request.md")) from None
    except RecursionError:  # only reachable by callers that skip load_request's depth limit
        raise RequestError(source, ["(top level): nested too deeply"]) from None
    size = len(req.model_dump_json())
    if size > MAX_PAYLOAD_BYTES:
        raise RequestError(source, [f"(top level): the request is {size} bytes as JSON, more than {MAX_PAYLOAD_BYTES}; "
                                    "Temporal refuses workflow inputs over 2 MB: shorten the lists and texts"])
    return req


def load_request(path: str | Path) -> RolloutRequest:
    """Read a YAML or JSON (by the `.json` suffix) request file, within the loader's limits, and validate it."""
    data = load_document(path, RequestError)
    return parse_request(data, str(path))
