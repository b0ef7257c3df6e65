"""A simulated fleet: which version runs where, and realistic metric samples, deterministic for a seed.

Latency is log-normal per interval; errors are binomial counts over a request volume. Scenario knobs
make a version slower or more error-prone in chosen regions, or make its deploy fail.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from pathlib import Path

import numpy as np
import yaml
from pydantic import BaseModel, Field

from activities.adapters.base import DeployError
from activities.adapters.simulated_traffic import SimulatedLoad
from canary.config import MetricSamples, MetricSpec
from common.types import MetricWindow, Role, StageRef


class VersionEffect(BaseModel):
    """How a version behaves differently from the healthy fleet, optionally only in some places."""

    version: str
    regions: list[str] = Field(default_factory=list, description="empty: every region")
    environments: list[str] = Field(default_factory=list, description="empty: every environment")
    latency_factor: float = Field(default=1.0, gt=0, description="1.3 = 30% slower")
    error_factor: float = Field(default=1.0, ge=0, description="2.0 = twice the errors")
    only_after_promotion: bool = Field(default=False, description="regress only once serving as primary (soak)")
    fail_deploy: bool = Field(default=False, description="deploying this version fails permanently")

    def applies(self, stage: StageRef, version: str | None) -> bool:
        return (
            version == self.version
            and (not self.regions or stage.region in self.regions)
            and (not self.environments or stage.environment in self.environments)
        )


class FleetScenario(BaseModel):
    """Knobs of the simulated fleet. Load from YAML with `FleetScenario.load(path)`."""

    seed: int = 7
    initial_version: str = "1.0.0"
    base_latency_ms: float = Field(default=120.0, gt=0)
    latency_sigma: float = Field(default=0.25, gt=0)
    base_error_rate: float = Field(default=0.002, ge=0, le=1)
    requests_per_interval: int = Field(default=2000, ge=1)
    min_samples: int = Field(default=0, ge=0, description="at least this many samples per window (compressed time)")
    max_samples: int = Field(default=2000, ge=1)
    deploy_delay_seconds: float = Field(default=0.0, ge=0, description="simulated time to become available")
    effects: list[VersionEffect] = Field(default_factory=list)

    @classmethod
    def load(cls, path: str | Path) -> "FleetScenario":
        return cls.model_validate(yaml.safe_load(Path(path).read_text()) or {})


class _Slot(BaseModel):
    primary: str | None = None
    history: list[str] = Field(default_factory=list)  # primaries before the current one, oldest first
    canary: str | None = None
    baseline: str | None = None


class SimulatedFleet:
    """In-memory fleet implementing both `Deployer` and `MetricSource`."""

    def __init__(self, scenario: FleetScenario | None = None) -> None:
        self.scenario = scenario or FleetScenario()
        self._slots: dict[tuple[str, str, str], _Slot] = {}
        self.calls: list[tuple[str, str, str]] = []  # (operation, stage key, version), for tests and demos
        self.load = SimulatedLoad()  # traffic hook: shares, replicas and overload live in simulated_traffic.py

    # -- state -----------------------------------------------------------------------------------
    def slot(self, stage: StageRef) -> _Slot:
        key = (stage.service, stage.region, stage.environment)
        if key not in self._slots:
            self._slots[key] = _Slot(primary=self.scenario.initial_version)
        return self._slots[key]

    def snapshot(self) -> dict[str, dict[str, str | None]]:
        return {
            f"{s}/{r}/{e}": {"primary": v.primary, "canary": v.canary, "baseline": v.baseline}
            for (s, r, e), v in sorted(self._slots.items())
        }

    def _effect(self, stage: StageRef, version: str | None) -> VersionEffect | None:
        return next((e for e in self.scenario.effects if e.applies(stage, version)), None)

    # -- Deployer --------------------------------------------------------------------------------
    async def current_version(self, stage: StageRef) -> str | None:
        return self.slot(stage).primary

    async def deploy(self, stage: StageRef, role: Role, version: str, image: str | None, replicas: int) -> None:
        self.calls.append((f"deploy_{role}", stage.key, version))
        effect = self._effect(stage, version)
        if effect is not None and effect.fail_deploy:
            raise DeployError(
                f"{stage.key}: {role} {image or version} never became available (simulated deploy failure)", retryable=False
            )
        if self.scenario.deploy_delay_seconds:
            await asyncio.sleep(self.scenario.deploy_delay_seconds)
        slot = self.slot(stage)
        if role == "canary":
            slot.canary = version
        elif role == "baseline":
            slot.baseline = version
        else:
            raise DeployError(f"deploy() handles canary and baseline, not {role!r}", retryable=False)

    async def promote(self, stage: StageRef, version: str, image: str) -> str | None:
        self.calls.append(("promote", stage.key, version))
        slot = self.slot(stage)
        if slot.primary == version:  # already promoted: report the same predecessor as the first call did
            return slot.history[-1] if slot.history else None
        previous = slot.primary
        if previous is not None:
            slot.history.append(previous)
        slot.primary = version
        return previous

    async def rollback(self, stage: StageRef, to_version: str | None, image: str | None) -> None:
        self.calls.append(("rollback", stage.key, to_version or "-"))
        slot = self.slot(stage)
        slot.canary = None
        slot.baseline = None
        if to_version is None or slot.primary == to_version:
            return
        if slot.history and slot.history[-1] == to_version:
            slot.history.pop()
        slot.primary = to_version

    async def cleanup(self, stage: StageRef) -> None:
        self.calls.append(("cleanup", stage.key, "-"))
        slot = self.slot(stage)
        slot.canary = None
        slot.baseline = None

    # -- traffic hook: replicas and overload come from simulated_traffic.SimulatedLoad ---------------
    async def replicas(self, stage: StageRef) -> int:
        return self.load.replicas(stage)

    async def scale(self, stage: StageRef, replicas: int) -> None:
        self.calls.append(("scale", stage.key, str(replicas)))
        self.load.scale(stage, replicas)

    # -- MetricSource ----------------------------------------------------------------------------
    def _count(self, window: MetricWindow) -> int:
        seconds = max(0.0, (window.end - window.start).total_seconds())
        n = int(seconds // window.interval_seconds)
        return min(self.scenario.max_samples, max(n, self.scenario.min_samples))

    def _rng(self, *parts: object) -> np.random.Generator:
        digest = hashlib.sha256("|".join(str(p) for p in (self.scenario.seed, *parts)).encode()).digest()
        return np.random.default_rng(int.from_bytes(digest[:8], "big"))

    def _series(self, stage: StageRef, metric: MetricSpec, window: MetricWindow, role: Role, version: str | None) -> list[float]:
        n = self._count(window)
        if n == 0 or version is None:
            return []
        rng = self._rng(stage.key, metric.name, role, version, n)
        effect = self._effect(stage, version)
        if effect is not None and effect.only_after_promotion and role != "primary":
            effect = None
        lat = effect.latency_factor if effect else 1.0
        err = effect.error_factor if effect else 1.0
        load = self.load.effect(stage, window)  # traffic hook: an overloaded region is slower and sheds requests
        lat *= load.latency_factor
        s = self.scenario
        if metric.kind == "latency":
            mu = math.log(s.base_latency_ms * lat) - s.latency_sigma**2 / 2
            values = rng.lognormal(mu, s.latency_sigma, n)
        elif metric.kind == "error_rate":
            p = min(1.0, s.base_error_rate * err + load.error_rate)
            values = rng.binomial(s.requests_per_interval, p, n) / s.requests_per_interval
        else:
            values = rng.normal(1.0, 0.05, n)
        return [float(v) for v in values]

    async def fetch(
        self,
        stage: StageRef,
        metric: MetricSpec,
        window: MetricWindow,
        baseline: tuple[Role, str | None],
        canary: tuple[Role, str],
    ) -> MetricSamples:
        return MetricSamples(
            name=metric.name,
            baseline=self._series(stage, metric, window, *baseline),
            canary=self._series(stage, metric, window, *canary),
        )
