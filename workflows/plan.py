"""The plan: a pure function from a request to ordered waves of stages.

Rules, all enforced here and checked by property-based tests:
- a region's test stage runs in an earlier wave than its production stage;
- a wave touches at most `max_parallel_regions` regions and `max_parallel_prod_regions` production regions;
- the first production wave is the canary region alone (explicit, or the smallest traffic share);
- the k-th production wave touches at most `prod_traffic_caps[k]` of production traffic.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from common.types import EnvKind, stage_key
from workflows.request import Region, RolloutRequest
from workflows.windows import window_problems


class Stage(BaseModel):
    """One (region, environment) step of a rollout."""

    region: str
    environment: EnvKind
    traffic_share: float = 0.0

    @property
    def key(self) -> str:
        return stage_key(self.region, self.environment)


class Wave(BaseModel):
    """Stages that run in parallel; a wave starts only after the previous one has finished."""

    index: int
    kind: EnvKind
    stages: list[Stage]

    @property
    def traffic_share(self) -> float:
        return sum(s.traffic_share for s in self.stages)

    @property
    def regions(self) -> list[str]:
        return [s.region for s in self.stages]


class Plan(BaseModel):
    """Ordered waves, and the region chosen as the production canary."""

    waves: list[Wave]
    canary_region: str | None = None

    def stages(self) -> list[Stage]:
        return [s for w in self.waves for s in w.stages]

    def stage(self, key: str) -> Stage | None:
        return next((s for s in self.stages() if s.key == key), None)

    def wave_of(self, key: str) -> int | None:
        return next((w.index for w in self.waves for s in w.stages if s.key == key), None)


class PlanError(ValueError):
    """The blast-radius rules cannot all be met; `rule` names the one that fails."""

    def __init__(self, rule: str, message: str) -> None:
        self.rule = rule
        super().__init__(f"{rule}: {message}")


def _chunks(items: list[Region], size: int) -> list[list[Region]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def choose_canary_region(request: RolloutRequest) -> str | None:
    """The explicit canary region, else the production region with the smallest share (first on ties)."""
    prod = [r for r in request.regions if "prod" in r.environments]
    if not prod:
        return None
    if request.blast_radius.canary_region:
        return request.blast_radius.canary_region
    return min(prod, key=lambda r: r.traffic_share).name


def _prod_groups(request: RolloutRequest, canary: str) -> list[list[Region]]:
    """Greedily pack production regions, in request order after the canary, into capped waves."""
    br = request.blast_radius
    per_wave = min(br.max_parallel_regions, br.max_parallel_prod_regions)
    by_name = {r.name: r for r in request.regions}
    rest = [r for r in request.regions if "prod" in r.environments and r.name != canary]
    caps = br.prod_traffic_caps

    def cap(k: int) -> float:
        return caps[min(k, len(caps) - 1)]

    first = by_name[canary]
    if first.traffic_share > cap(0) + 1e-9:
        raise PlanError(
            "blast_radius.prod_traffic_caps",
            f"the canary region {canary} carries {first.traffic_share:.0%} of production traffic but the first "
            f"production wave may touch at most {cap(0):.0%}; raise prod_traffic_caps[0] or pick a smaller "
            "blast_radius.canary_region",
        )
    groups: list[list[Region]] = [[first]]
    current: list[Region] = []
    for region in rest:
        k = len(groups)
        if region.traffic_share > cap(k) + 1e-9:
            if current:
                groups.append(current)
                current = []
                k = len(groups)
            if region.traffic_share > cap(k) + 1e-9:
                raise PlanError(
                    "blast_radius.prod_traffic_caps",
                    f"region {region.name} carries {region.traffic_share:.0%} of production traffic but production "
                    f"wave {k + 1} may touch at most {cap(k):.0%}; raise the cap for later waves "
                    "or move smaller regions ahead of it",
                )
        share = sum(r.traffic_share for r in current)
        if current and (len(current) >= per_wave or share + region.traffic_share > cap(k) + 1e-9):
            groups.append(current)
            current = []
        current.append(region)
    if current:
        groups.append(current)
    return groups


def build_plan(request: RolloutRequest, now: datetime | None = None) -> Plan:
    """Turn a validated request into ordered waves; raise `PlanError` if the rules conflict. Given `now`, also
    refuse a region whose deployment window does not open soon enough (workflows/windows.py)."""
    if now is not None:
        for problem in window_problems(request, now):
            rule, _, message = problem.partition(": ")
            raise PlanError(rule, message)
    br = request.blast_radius
    canary = choose_canary_region(request)
    waves: list[Wave] = []

    def add(kind: EnvKind, regions: list[Region], env: EnvKind) -> None:
        for chunk in _chunks(regions, br.max_parallel_regions if kind == "test" else len(regions)):
            stages = [
                Stage(region=r.name, environment=env, traffic_share=r.traffic_share if env == "prod" else 0.0)
                for r in chunk
            ]
            waves.append(Wave(index=len(waves) + 1, kind=kind, stages=stages))

    test_only = [r for r in request.regions if r.environments == ["test"]]
    if test_only:
        add("test", test_only, "test")
    if canary is not None:
        for group in _prod_groups(request, canary):
            needs_test = [r for r in group if "test" in r.environments]
            if needs_test:
                add("test", needs_test, "test")
            add("prod", group, "prod")
    for i, gate in enumerate(request.approvals.gates):
        if gate.wave is not None and gate.wave > len(waves):
            raise PlanError(
                f"approvals.gates[{i}].wave",
                f"wave {gate.wave} does not exist; this plan has {len(waves)} waves (see `bifrost plan`)",
            )
    return Plan(waves=waves, canary_region=canary)
