"""Traffic and capacity of the simulated fleet: weighted record sets, replicas per region, and overload.

`SimulatedRecordSet` is a `TrafficRouter` without DNS. `SimulatedLoad` knows, over time, each region's share of
a service's traffic and its primary's replicas; the simulated metric source asks it how much traffic a region had
during a window and how overloaded it was, so a drained region yields no samples, a loaded one samples over more
requests, and latency and errors rise when a region's load passes its capacity, as they do on a real fleet that
receives traffic it was not scaled for.

Both keep their state in the fleet's SQLite state (`SimulatedFleet`), not in the worker's memory: every worker
process on one fleet file, and a worker started after another was killed, sees the same weights, replicas and
load, as workers see one Route 53 record set and receivers that keep their replicas.

The model learns what happens through its own adapters, which the registry puts around the routers and
deployers of stages whose metrics it simulates: `ObservedRouter` (every weight read or set) and
`ObservedDeployer` (every replica count read or set). The traffic activities never know it is there.

The model: a service's demand is fixed when its weights are first seen, at `utilization` (default 60%) of the
capacity of the regions serving it then. A region's load is demand x its share; its capacity is replicas x
`replica_rps`. Latency grows past 70% utilisation and triples at 100%; past 100% the excess requests fail.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Protocol

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


class LoadStore(Protocol):
    """Where the traffic model keeps its timelines: the fleet's SQLite state (`SimulatedFleet`), so every worker
    process on one fleet file, and a worker started after another was killed, sees the same replicas and shares.

    Times are POSIX seconds; a line's entries are ordered by time, then by when they were added."""

    def load_replicas_at(self, service: str, region: str, environment: str, at: float | None) -> int | None: ...

    def load_add_replicas(self, service: str, region: str, environment: str, at: float, replicas: int,
                          start: int) -> None: ...

    def load_shares_at(self, service: str, environment: str, at: float) -> dict[str, float] | None: ...

    def load_add_shares(self, service: str, environment: str, at: float, shares: dict[str, float],
                        demand: Callable[[], float]) -> None: ...

    def load_demand(self, service: str, environment: str) -> float | None: ...


class SimulatedLoad:
    """Each region's traffic share and replicas over time, per service; answers how overloaded a region was.

    The timelines live in `store` (the fleet's state), not in this object: only the starting replicas of the
    targets file and the model's constants are per process."""

    def __init__(self, store: LoadStore, *, utilization: float = 0.6, replica_rps: float = 100.0,
                 default_replicas: int = DEFAULT_REPLICAS, clock: Callable[[], datetime] = sim_now) -> None:
        self.store = store
        self.utilization = utilization
        self.replica_rps = replica_rps
        self.default_replicas = default_replicas
        self.clock = clock
        self._start_replicas: dict[tuple[str, str], int] = {}  # (region, environment) -> replicas at start

    # -- capacity ------------------------------------------------------------------------------------
    def configure(self, region: str, environment: str, replicas: int) -> None:
        """The replicas a region's primary starts with (from the targets file)."""
        self._start_replicas[(region, environment)] = replicas

    def _start(self, stage: StageRef) -> int:
        return self._start_replicas.get((stage.region, stage.environment), self.default_replicas)

    def replicas(self, stage: StageRef) -> int:
        """The primary's replicas now (the last recorded, else the targets file's start)."""
        got = self.store.load_replicas_at(stage.service, stage.region, stage.environment, None)
        return self._start(stage) if got is None else got

    def scale(self, stage: StageRef, replicas: int) -> None:
        """Set the primary's replicas from now on (the simulated fleet is ready at once)."""
        if replicas < 0:
            raise ValueError(f"replicas must be >= 0, got {replicas}")
        self.store.load_add_replicas(stage.service, stage.region, stage.environment, self.clock().timestamp(),
                                     replicas, self._start(stage))

    def observe_replicas(self, stage: StageRef, replicas: int) -> None:
        """Record replicas read from (or set on) a real deployer, so overload follows the real capacity."""
        self.scale(stage, max(0, replicas))

    def _replicas_at(self, stage: StageRef, when: datetime) -> int:
        got = self.store.load_replicas_at(stage.service, stage.region, stage.environment, when.timestamp())
        return self._start(stage) if got is None else got

    # -- traffic ------------------------------------------------------------------------------------
    def observe_weights(self, service: str, environment: str, weights: dict[str, int]) -> None:
        """Record the weights (by region) a service's record set has from now on."""
        total = sum(weights.values())
        shares = {r: (w / total if total else 0.0) for r, w in weights.items()}
        now = self.clock()

        def demand() -> float:  # fixed when the service's weights are first seen, by whichever process sees them
            capacity = sum(self._replicas_at(StageRef(service=service, region=r, environment=environment), now)
                           * self.replica_rps for r, s in shares.items() if s > 0)
            return self.utilization * capacity

        self.store.load_add_shares(service, environment, now.timestamp(), shares, demand)

    def effect(self, stage: StageRef, window: MetricWindow) -> LoadEffect:
        """The traffic and overload of a stage at the end of `window`; no effect for regions whose traffic was never seen."""
        shares = self.store.load_shares_at(stage.service, stage.environment, window.end.timestamp())
        if shares is None or stage.region not in shares:
            return LoadEffect()
        share = shares[stage.region]
        demand = self.store.load_demand(stage.service, stage.environment) or 0.0
        load = demand * share
        capacity = self._replicas_at(stage, window.end) * self.replica_rps
        if load <= 0:
            return LoadEffect(traffic=0.0)
        effect = overload(load / capacity if capacity > 0 else math.inf)
        return replace(effect, traffic=share * len(shares))


class WeightStore(Protocol):
    """Where simulated record sets keep their weights: the fleet's SQLite state, shared by its worker processes."""

    def record_weights(self, service: str, environment: str, initial: dict[str, int],
                       change: Callable[[dict[str, int]], dict[str, int]] | None = None) -> dict[str, int]: ...


class SimulatedRecordSet:
    """A weighted record set kept in the fleet's state (a `TrafficRouter`): atomic, guarded changes that every
    worker on the fleet sees, as they would see one Route 53 record set; and a change counter of this process."""

    def __init__(self, name: str, ttl_seconds: int, store: WeightStore, service: str, environment: str) -> None:
        self._name = name
        self._ttl = ttl_seconds
        self._initial: dict[str, int] = {}  # the targets file's weights: the record set's until it is changed
        self._store, self._service, self._environment = store, service, environment
        self.changes = 0  # change batches this process applied, for tests and benchmarks

    @property
    def name(self) -> str:
        return self._name

    def add(self, set_identifier: str, weight: int, ttl_seconds: int) -> None:
        self._initial.setdefault(set_identifier, weight)
        self._ttl = max(self._ttl, ttl_seconds)

    def _no_records(self) -> TrafficError:
        return TrafficError(f"{self._name} has no records; add `traffic.simulated` to the region's target", retryable=False)

    async def weights(self) -> dict[str, int]:
        if not self._initial:
            raise self._no_records()
        return await asyncio.to_thread(self._store.record_weights, self._service, self._environment, self._initial)

    async def set_weights(self, wanted: dict[str, int], *, expect: dict[str, int] | None = None) -> dict[str, int]:
        from activities.adapters.route53 import validate_weights

        if not self._initial:
            raise self._no_records()
        changed = [False]

        def change(current: dict[str, int]) -> dict[str, int]:  # in the store's transaction: no lost update
            if expect is not None and current != expect:
                raise TrafficError(f"weights of {self._name} changed under us: expected {expect}, found {current}; "
                                   "another change is in progress, re-read and retry", retryable=True)
            validate_weights(current, wanted)
            changed[0] = {**current, **wanted} != current
            return {**current, **wanted}

        after = await asyncio.to_thread(self._store.record_weights, self._service, self._environment, self._initial,
                                        change)
        self.changes += changed[0]
        return after

    async def ttl_seconds(self) -> int:
        return self._ttl


class SimulatedRecordSets:
    """The simulated record sets of a worker: one per service and environment, holding every simulated region."""

    def __init__(self, store: WeightStore) -> None:
        self._store = store
        self._records: dict[str, list[tuple[str, int, int]]] = {}  # environment -> (set id, weight, ttl)
        self._sets: dict[tuple[str, str], SimulatedRecordSet] = {}

    def add_region(self, environment: str, set_identifier: str, weight: int, ttl_seconds: int) -> None:
        self._records.setdefault(environment, []).append((set_identifier, weight, ttl_seconds))

    def record_set(self, service: str, environment: str) -> SimulatedRecordSet:
        key = (service, environment)
        if key not in self._sets:
            rs = SimulatedRecordSet(f"simulated record set of {service} ({environment})", 0, self._store, service,
                                    environment)
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

    async def _observe(self, weights: dict[str, int]) -> dict[str, int]:
        regions = self.regions()
        if regions:  # the fleet's state may wait for another worker's write: off the event loop
            await asyncio.to_thread(self.load.observe_weights, self.service, self.environment,
                                    {r: weights.get(sid, 0) for r, sid in regions.items()})
        return weights

    async def weights(self) -> dict[str, int]:
        return await self._observe(await self.inner.weights())

    async def set_weights(self, wanted: dict[str, int], *, expect: dict[str, int] | None = None) -> dict[str, int]:
        return await self._observe(await self.inner.set_weights(wanted, expect=expect))

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
        await asyncio.to_thread(self.load.observe_replicas, stage, count)
        return count

    async def scale(self, stage: StageRef, replicas: int) -> None:
        await self.inner.scale(stage, replicas)  # returns once that many are ready
        await asyncio.to_thread(self.load.observe_replicas, stage, replicas)

    async def autoscaler(self, stage: StageRef) -> Autoscaler | None:
        inner = autoscaling(self.inner)
        return None if inner is None else await inner.autoscaler(stage)

    async def set_min_replicas(self, stage: StageRef, autoscaler: str, min_replicas: int, *, wait: bool) -> None:
        inner = autoscaling(self.inner)
        if inner is None:
            raise DeployError(f"{stage.key}: this deployer has no autoscalers", retryable=False)
        await inner.set_min_replicas(stage, autoscaler, min_replicas, wait=wait)
        await self.replicas(stage)  # the fleet learns what the autoscaler now runs
