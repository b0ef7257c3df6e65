"""Traffic and capacity of the simulated fleet: weighted record sets in memory, replicas per region, and overload.

`SimulatedRecordSet` is a `TrafficRouter` without DNS. `SimulatedLoad` remembers, over time, each region's
share of a service's traffic and its primary's replicas; the simulated metric source asks it how much traffic
a region had during a window and how overloaded it was, so a drained region yields no samples, a loaded one
more, and latency and errors rise when a region's load passes its capacity, as they do on a real fleet that
receives traffic it was not scaled for.

The model learns what happens through its own adapters, which the registry puts around the routers and
deployers of stages whose metrics it simulates: `ObservedRouter` (every weight read or set) and
`ObservedDeployer` (every replica count read or set). The traffic activities never know it is there.

The model: a service's demand is fixed when its weights are first seen, at `utilization` (default 60%) of the
capacity of the regions serving it then. A region's load is demand x its share; its capacity is replicas x
`replica_rps`. Latency grows past 70% utilisation and triples at 100%; past 100% the excess requests fail.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from temporalio import activity

from activities.adapters.base import Autoscaler, Deployer, DeployError, TrafficError, TrafficRouter, autoscaling
from common.types import MetricWindow, Role, StageRef

DEFAULT_REPLICAS = 4
KNEE = 0.7  # utilisation where latency starts to grow


def sim_now() -> datetime:
    """The simulation's clock: inside an activity, when the server scheduled it (so it follows time skipping)."""
    if activity.in_activity():
        return activity.info().current_attempt_scheduled_time
    return datetime.now(UTC)


@dataclass(frozen=True)
class LoadEffect:
    """How overload changes a region's samples: a latency multiplier and a fraction of requests that fail."""

    utilization: float = 0.0
    latency_factor: float = 1.0
    error_rate: float = 0.0
    traffic: float = 1.0  # the region's share of the service's traffic over an even split: 0 drained, 1.5 loaded


def overload(utilization: float) -> LoadEffect:
    """Latency flat up to 70% utilisation, x3 at 100% and +5x per 100% beyond; above 100% the excess fails."""
    u = max(0.0, utilization)
    if u <= KNEE:
        factor = 1.0
    elif u <= 1.0:
        factor = 1.0 + 2.0 * ((u - KNEE) / (1.0 - KNEE)) ** 2
    else:
        factor = 3.0 + 5.0 * (u - 1.0)
    errors = 1.0 - 1.0 / u if u > 1.0 else 0.0
    return LoadEffect(utilization=u, latency_factor=factor, error_rate=errors)


@dataclass
class _Timeline:
    """Values over time; before the first entry, the first value holds."""

    times: list[datetime] = field(default_factory=list)
    values: list[object] = field(default_factory=list)

    def add(self, at: datetime, value: object) -> None:
        i = bisect.bisect_right(self.times, at)
        self.times.insert(i, at)
        self.values.insert(i, value)

    def at(self, when: datetime) -> object | None:
        if not self.values:
            return None
        i = bisect.bisect_right(self.times, when)
        return self.values[max(0, i - 1)]

    def last(self) -> object | None:
        return self.values[-1] if self.values else None


class SimulatedLoad:
    """Each region's traffic share and replicas over time, per service; answers how overloaded a region was."""

    def __init__(self, *, utilization: float = 0.6, replica_rps: float = 100.0, default_replicas: int = DEFAULT_REPLICAS,
                 clock: Callable[[], datetime] = sim_now) -> None:
        self.utilization = utilization
        self.replica_rps = replica_rps
        self.default_replicas = default_replicas
        self.clock = clock
        self._start_replicas: dict[tuple[str, str], int] = {}  # (region, environment) -> replicas at start
        self._replicas: dict[tuple[str, str, str], _Timeline] = {}  # (service, region, environment)
        self._shares: dict[tuple[str, str], _Timeline] = {}  # (service, environment) -> {region: share}
        self._demand: dict[tuple[str, str], float] = {}

    # -- capacity ------------------------------------------------------------------------------------
    def configure(self, region: str, environment: str, replicas: int) -> None:
        """The replicas a region's primary starts with (from the targets file)."""
        self._start_replicas[(region, environment)] = replicas

    def _replica_line(self, stage: StageRef) -> _Timeline:
        key = (stage.service, stage.region, stage.environment)
        if key not in self._replicas:
            start = self._start_replicas.get((stage.region, stage.environment), self.default_replicas)
            self._replicas[key] = _Timeline([datetime.min.replace(tzinfo=UTC)], [start])
        return self._replicas[key]

    def replicas(self, stage: StageRef) -> int:
        value = self._replica_line(stage).last()
        assert isinstance(value, int)
        return value

    def scale(self, stage: StageRef, replicas: int) -> None:
        """Set the primary's replicas from now on (the simulated fleet is ready at once)."""
        if replicas < 0:
            raise ValueError(f"replicas must be >= 0, got {replicas}")
        if replicas != self.replicas(stage):
            self._replica_line(stage).add(self.clock(), replicas)

    def observe_replicas(self, stage: StageRef, replicas: int) -> None:
        """Record replicas read from (or set on) a real deployer, so overload follows the real capacity."""
        self.scale(stage, max(0, replicas))

    def _replicas_at(self, stage: StageRef, when: datetime) -> int:
        value = self._replica_line(stage).at(when)
        assert isinstance(value, int)
        return value

    # -- traffic ------------------------------------------------------------------------------------
    def observe_weights(self, service: str, environment: str, weights: dict[str, int]) -> None:
        """Record the weights (by region) a service's record set has from now on."""
        total = sum(weights.values())
        shares = {r: (w / total if total else 0.0) for r, w in weights.items()}
        key = (service, environment)
        line = self._shares.setdefault(key, _Timeline())
        if line.last() == shares:
            return
        now = self.clock()
        if key not in self._demand:
            capacity = sum(self._replicas_at(StageRef(service=service, region=r, environment=environment), now)
                           * self.replica_rps for r, s in shares.items() if s > 0)
            self._demand[key] = self.utilization * capacity
        line.add(now, shares)

    def effect(self, stage: StageRef, window: MetricWindow) -> LoadEffect:
        """The traffic and overload of a stage at the end of `window`; no effect for regions whose traffic was never seen."""
        key = (stage.service, stage.environment)
        line = self._shares.get(key)
        shares = line.at(window.end) if line is not None else None
        if not isinstance(shares, dict) or stage.region not in shares:
            return LoadEffect()
        share = shares[stage.region]
        load = self._demand[key] * share
        capacity = self._replicas_at(stage, window.end) * self.replica_rps
        if load <= 0:
            return LoadEffect(traffic=0.0)
        effect = overload(load / capacity if capacity > 0 else math.inf)
        return replace(effect, traffic=share * len(shares))


class SimulatedRecordSet:
    """A weighted record set in memory (a `TrafficRouter`): atomic, guarded changes, and a change counter."""

    def __init__(self, name: str, ttl_seconds: int) -> None:
        self._name = name
        self._ttl = ttl_seconds
        self._weights: dict[str, int] = {}
        self.changes = 0  # change batches applied, for tests and benchmarks

    @property
    def name(self) -> str:
        return self._name

    def add(self, set_identifier: str, weight: int, ttl_seconds: int) -> None:
        self._weights.setdefault(set_identifier, weight)
        self._ttl = max(self._ttl, ttl_seconds)

    async def weights(self) -> dict[str, int]:
        if not self._weights:
            raise TrafficError(f"{self._name} has no records; add `traffic.simulated` to the region's target", retryable=False)
        return dict(self._weights)

    async def set_weights(self, wanted: dict[str, int], *, expect: dict[str, int] | None = None) -> dict[str, int]:
        from activities.adapters.route53 import validate_weights

        current = await self.weights()
        if expect is not None and current != expect:
            raise TrafficError(f"weights of {self._name} changed under us: expected {expect}, found {current}; "
                               "another change is in progress, re-read and retry", retryable=True)
        validate_weights(current, wanted)
        target = {**current, **wanted}
        if target != current:
            self._weights = target
            self.changes += 1
        return dict(self._weights)

    async def ttl_seconds(self) -> int:
        return self._ttl


class SimulatedRecordSets:
    """The simulated record sets of a worker: one per service and environment, holding every simulated region."""

    def __init__(self) -> None:
        self._records: dict[str, list[tuple[str, int, int]]] = {}  # environment -> (set id, weight, ttl)
        self._sets: dict[tuple[str, str], SimulatedRecordSet] = {}

    def add_region(self, environment: str, set_identifier: str, weight: int, ttl_seconds: int) -> None:
        self._records.setdefault(environment, []).append((set_identifier, weight, ttl_seconds))

    def record_set(self, service: str, environment: str) -> SimulatedRecordSet:
        key = (service, environment)
        if key not in self._sets:
            rs = SimulatedRecordSet(f"simulated record set of {service} ({environment})", 0)
            for set_id, weight, ttl in self._records.get(environment, []):
                rs.add(set_id, weight, ttl)
            self._sets[key] = rs
        return self._sets[key]


class ObservedRouter:
    """A `TrafficRouter` that tells the simulated fleet's traffic model every weight it reads or sets.

    `regions()` maps each region of the record set to its set identifier (the registry knows them)."""

    def __init__(self, router: TrafficRouter, load: SimulatedLoad, service: str, environment: str,
                 regions: Callable[[], dict[str, str]]) -> None:
        self.inner = router
        self.load = load
        self.service = service
        self.environment = environment
        self.regions = regions

    @property
    def name(self) -> str:
        return self.inner.name

    def _observe(self, weights: dict[str, int]) -> dict[str, int]:
        regions = self.regions()
        if regions:
            self.load.observe_weights(self.service, self.environment, {r: weights.get(sid, 0) for r, sid in regions.items()})
        return weights

    async def weights(self) -> dict[str, int]:
        return self._observe(await self.inner.weights())

    async def set_weights(self, wanted: dict[str, int], *, expect: dict[str, int] | None = None) -> dict[str, int]:
        return self._observe(await self.inner.set_weights(wanted, expect=expect))

    async def ttl_seconds(self) -> int:
        return await self.inner.ttl_seconds()


class ObservedDeployer:
    """A real `Deployer` whose primary's replica counts the simulated traffic model learns, for stages whose
    metrics are simulated: overload then follows the real capacity."""

    def __init__(self, deployer: Deployer, load: SimulatedLoad) -> None:
        self.inner = deployer
        self.load = load

    async def current_version(self, stage: StageRef) -> str | None:
        return await self.inner.current_version(stage)

    async def deploy(self, stage: StageRef, role: Role, version: str, image: str | None, replicas: int) -> None:
        await self.inner.deploy(stage, role, version, image, replicas)

    async def promote(self, stage: StageRef, version: str, image: str) -> str | None:
        return await self.inner.promote(stage, version, image)

    async def rollback(self, stage: StageRef, to_version: str | None, image: str | None) -> None:
        await self.inner.rollback(stage, to_version, image)

    async def cleanup(self, stage: StageRef) -> None:
        await self.inner.cleanup(stage)

    async def replicas(self, stage: StageRef) -> int:
        count = await self.inner.replicas(stage)
        self.load.observe_replicas(stage, count)
        return count

    async def scale(self, stage: StageRef, replicas: int) -> None:
        await self.inner.scale(stage, replicas)  # returns once that many are ready
        self.load.observe_replicas(stage, replicas)

    async def autoscaler(self, stage: StageRef) -> Autoscaler | None:
        inner = autoscaling(self.inner)
        return None if inner is None else await inner.autoscaler(stage)

    async def set_min_replicas(self, stage: StageRef, autoscaler: str, min_replicas: int, *, wait: bool) -> None:
        inner = autoscaling(self.inner)
        if inner is None:
            raise DeployError(f"{stage.key}: this deployer has no autoscalers", retryable=False)
        await inner.set_min_replicas(stage, autoscaler, min_replicas, wait=wait)
        await self.replicas(stage)  # the fleet learns what the autoscaler now runs
