"""The rollout request itself: its fields, and the checks across them that run once every field is valid."""

from __future__ import annotations

import math

from pydantic import Field, field_validator, model_validator

from common.text import Identity
from common.traffic.models import MAX_REGIONS, MAX_SERVICE_LEN
from common.types import ENV_KINDS, ConcurrencyPolicy, RollbackScope, stage_key
from workflows.request.bounds import MAX_LOOKS, MAX_WORKFLOW_ID_BYTES, NAME_PATTERN, RequestModel
from workflows.request.regions import EVACUATES, EvacuationSettings, HoldSettings, Region
from workflows.request.settings import Approvals, BlastRadius, CanarySettings, Change, SoakSettings
from workflows.request.values import image_reference_problem, lone_surrogate


class RolloutRequest(RequestModel):
    """A request to roll `service` out at `version` across `regions`, in order."""

    service: str = Field(pattern=NAME_PATTERN, min_length=1, max_length=MAX_SERVICE_LEN,
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
        where = lone_surrogate(self.model_dump(), "")
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
