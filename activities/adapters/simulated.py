"""A simulated fleet: which version runs where, and realistic metric samples, deterministic for a seed.

Which version runs where is kept in SQLite (a file under `.bifrost/`, or memory), so a restarted worker,
or several workers on one file, see one fleet. Latency is log-normal per interval; errors are binomial
counts over a request volume. Scenario knobs make a version slower or more error-prone in chosen
regions, or make its deploy fail.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import yaml
from pydantic import BaseModel, Field

from activities.adapters.base import DeployError
from activities.adapters.simulated_traffic import SimulatedLoad
from canary.config import MetricSamples, MetricSpec
from common.types import MetricWindow, Role, StageRef, stage_key

if TYPE_CHECKING:
    import numpy as np

    from canary.guard_counts import Histogram


NO_HISTORY_BEFORE = 12 * 3600.0  # seconds before the latest window asked for: no samples (no history)


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
    full_sample_share: float = Field(
        default=20.0, gt=0, le=100,
        description="a weighted canary arm with at least this percent of the stage's traffic yields one sample per "
                    "interval; a smaller arm proportionally fewer (its intervals hold too few requests to measure)")
    fresh_draws: bool = Field(
        default=True,
        description="each window of a primary draws its own samples, as a live fleet's do (the demo, benchmarks). "
                    "False: one draw per stage, version and sample count, so a test's health verdict does not depend "
                    "on the service's random name or the hour it ran")
    latency_histograms: bool = Field(
        default=False, description="also report each latency metric's buckets per interval (requests_per_interval "
                                   "requests counted into buckets 1.19x apart), as a Prometheus histogram does")

    @classmethod
    def load(cls, path: str | Path) -> "FleetScenario":
        return cls.model_validate(yaml.safe_load(Path(path).read_text()) or {})


class SlotState(BaseModel):
    """What runs in one service/region/environment. Stored as JSON, so a new field with a default needs no migration."""

    primary: str | None = None
    history: list[str] = Field(default_factory=list)  # primaries before the current one, oldest first
    canary: str | None = None
    baseline: str | None = None
    replicas: int | None = None  # the primary's replicas once scaled (None: the traffic model's default)
    weights: dict[str, int] | None = None  # the simulated canary router's arm weights once set (None: never weighted)


# Bookkeeping: a change to these is not logged as an effect (the primary's own change already says it).
_NOT_EFFECTS = frozenset({"history"})


class FleetEffect(NamedTuple):
    """One actual change of the fleet: `field` of a stage went from `before` to `after` during `operation`."""

    operation: str
    service: str
    stage_key: str
    field: str
    before: Any
    after: Any
    pid: int  # the process that made the change


SCHEMA_VERSION = 1
_SCHEMA = (
    # one row per service/region/environment; `state` is a SlotState as JSON
    """CREATE TABLE IF NOT EXISTS slots (
        service TEXT NOT NULL, region TEXT NOT NULL, environment TEXT NOT NULL, state TEXT NOT NULL,
        PRIMARY KEY (service, region, environment))""",
    # append-only. 'call': an operation was invoked (retries and no-ops too); `version` is its argument.
    # 'effect': the operation changed `field` of the stage from `before` to `after` (JSON values).
    """CREATE TABLE IF NOT EXISTS events (
        id INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, pid INTEGER NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('call', 'effect')), operation TEXT NOT NULL,
        service TEXT NOT NULL, region TEXT NOT NULL, environment TEXT NOT NULL,
        version TEXT, field TEXT, before TEXT, after TEXT)""",
    "CREATE INDEX IF NOT EXISTS events_by_kind ON events (kind, id)",
    # the traffic model's timelines (simulated_traffic.SimulatedLoad): a primary's replicas from `at` (POSIX s) on,
    # a record set's shares by region (JSON) from `at` on, and each service's demand, fixed when first seen
    """CREATE TABLE IF NOT EXISTS load_replicas (
        id INTEGER PRIMARY KEY AUTOINCREMENT, service TEXT NOT NULL, region TEXT NOT NULL,
        environment TEXT NOT NULL, at REAL NOT NULL, replicas INTEGER NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS load_replicas_by_stage ON load_replicas (service, region, environment, at, id)",
    """CREATE TABLE IF NOT EXISTS load_shares (
        id INTEGER PRIMARY KEY AUTOINCREMENT, service TEXT NOT NULL, environment TEXT NOT NULL,
        at REAL NOT NULL, shares TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS load_shares_by_set ON load_shares (service, environment, at, id)",
    """CREATE TABLE IF NOT EXISTS load_demand (
        service TEXT NOT NULL, environment TEXT NOT NULL, demand REAL NOT NULL, PRIMARY KEY (service, environment))""",
    # simulated record sets (simulated_traffic.SimulatedRecordSet): weights by set identifier (JSON) once changed
    """CREATE TABLE IF NOT EXISTS record_weights (
        service TEXT NOT NULL, environment TEXT NOT NULL, weights TEXT NOT NULL, PRIMARY KEY (service, environment))""",
)

T = TypeVar("T")


class SimulatedFleet:
    """A fleet implementing both `Deployer` and `MetricSource`, its state in SQLite: a file, or memory.

    Each operation is one `BEGIN IMMEDIATE` transaction, so workers sharing the file (threads or processes)
    never interleave a read-modify-write; every call and every actual change is logged in `events`.
    """

    def __init__(
        self, scenario: FleetScenario | None = None, state_file: str | Path | None = None,
        *, busy_timeout_seconds: float = 30.0,
    ) -> None:
        self.scenario = scenario or FleetScenario()
        self.state_file = Path(state_file) if state_file is not None else None
        self.busy_timeout_seconds = busy_timeout_seconds
        self._conn: sqlite3.Connection | None = None  # opened on first use: a worker that never uses it makes no file
        self._lock = threading.Lock()  # one connection per fleet; its threads take turns
        self.load = SimulatedLoad(self)  # shares, replicas and overload: simulated_traffic.py; the registry wires its observers
        self._latest_end: float | None = None  # the latest window asked for: the fleet keeps no history before it

    # -- storage ---------------------------------------------------------------------------------
    @property
    def where(self) -> str:
        """The state file's path, or "memory"."""
        return str(self.state_file) if self.state_file is not None else "memory"

    def open(self) -> "SimulatedFleet":
        """Open (and create) the state database now, so a bad path fails at start-up rather than mid-rollout."""
        with self._lock:
            self._connection()
        return self

    def close(self) -> None:
        """Close the database: in memory, the state is gone; a file keeps it for the next opener."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> "SimulatedFleet":
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def remove_state_file(path: str | Path) -> None:
        """Delete a fleet database with its WAL and shared-memory files (a stale WAL must not outlive its db)."""
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)

    def _error(self, err: BaseException, *, retryable: bool) -> DeployError:
        return DeployError(
            f"simulated fleet state {self.where}: {err}; check the path (--fleet-db), or delete the file to start "
            "the fleet afresh", retryable=retryable,
        )

    def _connection(self) -> sqlite3.Connection:
        if self._conn is not None:
            return self._conn
        try:
            if self.state_file is not None:
                self.state_file.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self.state_file if self.state_file is not None else ":memory:",
                timeout=self.busy_timeout_seconds, isolation_level=None, check_same_thread=False,
            )
        except (OSError, sqlite3.Error) as err:
            raise self._error(err, retryable=False) from err
        try:
            conn.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer ("memory" in memory)
            conn.execute("PRAGMA synchronous=NORMAL")  # with WAL, still consistent after a process is killed
            with _transaction(conn):
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version not in (0, SCHEMA_VERSION):
                    raise DeployError(
                        f"simulated fleet state {self.where} has schema version {version}, but this Bifrost "
                        f"reads version {SCHEMA_VERSION}: delete the file or choose another (--fleet-db)",
                        retryable=False,
                    )
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except BaseException as err:
            conn.close()
            if isinstance(err, sqlite3.Error):
                raise self._error(err, retryable=False) from err
            raise
        self._conn = conn
        return conn

    def _transact(
        self, stage: StageRef, operation: str | None, version: str | None, change: Callable[[SlotState], T],
        *, log_call: bool = True,
    ) -> T:
        """Read the stage's slot, apply `change`, write it back and log the call and effects, all in one transaction."""
        where = (stage.service, stage.region, stage.environment)
        with self._lock:
            conn = self._connection()
            try:
                with _transaction(conn):
                    row = conn.execute(
                        "SELECT state FROM slots WHERE service=? AND region=? AND environment=?", where
                    ).fetchone()
                    if row is None:
                        state = SlotState(primary=self.scenario.initial_version)
                        conn.execute("INSERT INTO slots VALUES (?, ?, ?, ?)", (*where, state.model_dump_json()))
                    else:
                        state = SlotState.model_validate_json(row[0])
                    now, pid = datetime.now(UTC).isoformat(), os.getpid()
                    if operation is not None and log_call:
                        conn.execute(
                            "INSERT INTO events (at, pid, kind, operation, service, region, environment, version) "
                            "VALUES (?, ?, 'call', ?, ?, ?, ?, ?)", (now, pid, operation, *where, version),
                        )
                    before = state.model_dump()
                    result = change(state)
                    after = state.model_dump()
                    if after != before:
                        conn.execute(
                            "UPDATE slots SET state=? WHERE service=? AND region=? AND environment=?",
                            (state.model_dump_json(), *where),
                        )
                        for name in after:
                            if name not in _NOT_EFFECTS and after[name] != before[name]:
                                conn.execute(
                                    "INSERT INTO events (at, pid, kind, operation, service, region, environment, "
                                    "field, before, after) VALUES (?, ?, 'effect', ?, ?, ?, ?, ?, ?, ?)",
                                    (now, pid, operation or "-", *where, name, json.dumps(before[name]),
                                     json.dumps(after[name])),
                                )
                    return result
            except sqlite3.Error as err:
                raise self._error(err, retryable=True) from err

    async def _run(
        self, stage: StageRef, operation: str | None, version: str | None, change: Callable[[SlotState], T],
        *, log_call: bool = True,
    ) -> T:
        """`_transact` off the event loop: a worker sharing the file may hold the write lock for a moment."""
        return await asyncio.to_thread(self._transact, stage, operation, version, change, log_call=log_call)

    def _atomically(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """`work` on the connection in one write transaction (the traffic model's and record sets' state)."""
        with self._lock:
            conn = self._connection()
            try:
                with _transaction(conn):
                    return work(conn)
            except sqlite3.Error as err:
                raise self._error(err, retryable=True) from err

    def _read(self, sql: str, args: tuple[Any, ...]) -> Any:
        with self._lock:
            try:
                return self._connection().execute(sql, args).fetchone()
            except sqlite3.Error as err:
                raise self._error(err, retryable=True) from err

    # -- the traffic model's state (simulated_traffic.LoadStore, WeightStore): shared by every worker on the file --
    def load_replicas_at(self, service: str, region: str, environment: str, at: float | None) -> int | None:
        """The replicas recorded last at or before `at` (None: the latest), else the first recorded, else None."""
        where = "service=? AND region=? AND environment=?"
        row = self._read(f"SELECT replicas FROM load_replicas WHERE {where} AND at <= ? ORDER BY at DESC, id DESC "
                         "LIMIT 1", (service, region, environment, math.inf if at is None else at))
        if row is None:
            row = self._read(f"SELECT replicas FROM load_replicas WHERE {where} ORDER BY at, id LIMIT 1",
                             (service, region, environment))
        return None if row is None else int(row[0])

    def load_add_replicas(self, service: str, region: str, environment: str, at: float, replicas: int,
                          start: int) -> None:
        """Replicas from `at` on, unless the latest recorded (or `start`) already says so."""
        def add(conn: sqlite3.Connection) -> None:
            row = conn.execute("SELECT replicas FROM load_replicas WHERE service=? AND region=? AND environment=? "
                               "ORDER BY at DESC, id DESC LIMIT 1", (service, region, environment)).fetchone()
            if row is None and start != replicas:  # the targets file's start held until now
                conn.execute("INSERT INTO load_replicas (service, region, environment, at, replicas) VALUES (?, ?, ?, ?, ?)",
                             (service, region, environment, 0.0, start))
            if (start if row is None else row[0]) != replicas:
                conn.execute("INSERT INTO load_replicas (service, region, environment, at, replicas) VALUES (?, ?, ?, ?, ?)",
                             (service, region, environment, at, replicas))

        self._atomically(add)

    def load_shares_at(self, service: str, environment: str, at: float) -> dict[str, float] | None:
        """The shares recorded last at or before `at`, else the first recorded (before it, it held), else None."""
        row = self._read("SELECT shares FROM load_shares WHERE service=? AND environment=? AND at <= ? "
                         "ORDER BY at DESC, id DESC LIMIT 1", (service, environment, at))
        if row is None:
            row = self._read("SELECT shares FROM load_shares WHERE service=? AND environment=? ORDER BY at, id LIMIT 1",
                             (service, environment))
        return None if row is None else {str(k): float(v) for k, v in json.loads(row[0]).items()}

    def load_add_shares(self, service: str, environment: str, at: float, shares: dict[str, float],
                        demand: Callable[[], float]) -> None:
        """Shares from `at` on unless the latest recorded are the same; the service's demand on its first shares
        (the first process to record them wins)."""
        fixed = demand() if self.load_demand(service, environment) is None else None  # reads replicas: outside the lock

        def add(conn: sqlite3.Connection) -> None:
            row = conn.execute("SELECT shares FROM load_shares WHERE service=? AND environment=? "
                               "ORDER BY at DESC, id DESC LIMIT 1", (service, environment)).fetchone()
            if row is not None and json.loads(row[0]) == shares:
                return
            if fixed is not None:
                conn.execute("INSERT OR IGNORE INTO load_demand VALUES (?, ?, ?)", (service, environment, fixed))
            conn.execute("INSERT INTO load_shares (service, environment, at, shares) VALUES (?, ?, ?, ?)",
                         (service, environment, at, json.dumps(shares, sort_keys=True)))

        self._atomically(add)

    def load_demand(self, service: str, environment: str) -> float | None:
        row = self._read("SELECT demand FROM load_demand WHERE service=? AND environment=?", (service, environment))
        return None if row is None else float(row[0])

    def record_weights(self, service: str, environment: str, initial: dict[str, int],
                       change: Callable[[dict[str, int]], dict[str, int]] | None = None) -> dict[str, int]:
        """A simulated record set's weights (`initial` until first changed); `change` applied atomically when given."""
        def work(conn: sqlite3.Connection) -> dict[str, int]:
            row = conn.execute("SELECT weights FROM record_weights WHERE service=? AND environment=?",
                               (service, environment)).fetchone()
            current = dict(initial) if row is None else {str(k): int(v) for k, v in json.loads(row[0]).items()}
            if change is None:
                return current
            after = change(dict(current))
            if after != current:
                conn.execute("INSERT OR REPLACE INTO record_weights VALUES (?, ?, ?)",
                             (service, environment, json.dumps(after, sort_keys=True)))
            return after

        return self._atomically(work)

    # -- state, for tests and demos ------------------------------------------------------------------
    def slot(self, stage: StageRef) -> SlotState:
        """A copy of the stage's state (created on the scenario's initial version when new)."""
        return self._transact(stage, None, None, lambda s: s.model_copy(deep=True))

    def snapshot(self) -> dict[str, dict[str, str | None]]:
        """`service/region/env` -> primary, canary and baseline, for every stage the fleet has seen."""
        rows = self._query("SELECT service, region, environment, state FROM slots ORDER BY service, region, environment")
        out: dict[str, dict[str, str | None]] = {}
        for service, region, environment, raw in rows:
            s = SlotState.model_validate_json(raw)
            out[f"{service}/{region}/{environment}"] = {"primary": s.primary, "canary": s.canary, "baseline": s.baseline}
        return out

    @property
    def calls(self) -> list[tuple[str, str, str]]:
        """Every operation invoked, oldest first, as (operation, `region/env`, version or "-"); retries included."""
        rows = self._query("SELECT operation, region, environment, version FROM events WHERE kind='call' ORDER BY id")
        return [(op, stage_key(region, env), version or "-") for op, region, env, version in rows]

    @property
    def effects(self) -> list[FleetEffect]:
        """Every actual change, oldest first: a promote that found its version already primary adds none."""
        rows = self._query(
            "SELECT operation, service, region, environment, field, before, after, pid FROM events "
            "WHERE kind='effect' ORDER BY id"
        )
        return [FleetEffect(op, service, stage_key(region, env), name, json.loads(before), json.loads(after), pid)
                for op, service, region, env, name, before, after, pid in rows]

    def _query(self, sql: str) -> list[Any]:
        with self._lock:
            try:
                return self._connection().execute(sql).fetchall()
            except sqlite3.Error as err:
                raise self._error(err, retryable=True) from err

    def _effect(self, stage: StageRef, version: str | None) -> VersionEffect | None:
        return next((e for e in self.scenario.effects if e.applies(stage, version)), None)

    # -- Deployer --------------------------------------------------------------------------------
    async def current_version(self, stage: StageRef) -> str | None:
        return await self._run(stage, None, None, lambda s: s.primary)

    async def deploy(self, stage: StageRef, role: Role, version: str, image: str | None, replicas: int) -> None:
        operation = f"deploy_{role}"
        await self._run(stage, operation, version, lambda s: None)
        effect = self._effect(stage, version)
        if effect is not None and effect.fail_deploy:
            raise DeployError(
                f"{stage.key}: {role} {image or version} never became available (simulated deploy failure)", retryable=False
            )
        if role not in ("canary", "baseline"):
            raise DeployError(f"deploy() handles canary and baseline, not {role!r}", retryable=False)
        if self.scenario.deploy_delay_seconds:
            await asyncio.sleep(self.scenario.deploy_delay_seconds)

        def run(s: SlotState) -> None:
            if role == "canary":
                s.canary = version
            else:
                s.baseline = version

        await self._run(stage, operation, version, run, log_call=False)

    async def promote(self, stage: StageRef, version: str, image: str) -> str | None:
        def switch(s: SlotState) -> str | None:
            if s.primary == version:  # already promoted: report the same predecessor as the first call did
                return s.history[-1] if s.history else None
            previous = s.primary
            if previous is not None:
                s.history.append(previous)
            s.primary = version
            return previous

        return await self._run(stage, "promote", version, switch)

    async def rollback(self, stage: StageRef, to_version: str | None, image: str | None) -> None:
        def restore(s: SlotState) -> None:
            s.canary = None
            s.baseline = None
            if to_version is None or s.primary == to_version:
                return
            if s.history and s.history[-1] == to_version:
                s.history.pop()
            s.primary = to_version

        await self._run(stage, "rollback", to_version or "-", restore)

    async def cleanup(self, stage: StageRef) -> None:
        def remove(s: SlotState) -> None:
            s.canary = None
            s.baseline = None

        await self._run(stage, "cleanup", "-", remove)

    # -- replicas: the traffic model (simulated_traffic.SimulatedLoad) holds them unless scaled here --------
    async def replicas(self, stage: StageRef) -> int:
        stored = await self._run(stage, None, None, lambda s: s.replicas)
        return stored if stored is not None else await asyncio.to_thread(self.load.replicas, stage)

    async def scale(self, stage: StageRef, replicas: int) -> None:
        def resize(s: SlotState) -> None:
            s.replicas = replicas

        await self._run(stage, "scale", str(replicas), resize)
        await asyncio.to_thread(self.load.scale, stage, replicas)

    # -- the simulated canary router's state (simulated_router.SimulatedCanaryRouter) ---------------------
    async def arm_weights(self, stage: StageRef, change: Callable[[dict[str, int] | None], dict[str, int] | None] | None = None,
                          *, operation: str = "set_weights", version: str = "-") -> dict[str, int] | None:
        """The stage's arm weights (None: never set); `change` applied atomically when given (a call is logged)."""
        def work(s: SlotState) -> dict[str, int] | None:
            if change is not None:
                s.weights = change(None if s.weights is None else dict(s.weights))
            return None if s.weights is None else dict(s.weights)

        if change is None:
            return await self._run(stage, None, None, work)
        return await self._run(stage, operation, version, work)

    def _arm_share(self, stage: StageRef, role: Role) -> float | None:
        """A weighted canary arm's percent of the stage's traffic now (None: the stage was never weighted)."""
        if role not in ("canary", "baseline"):
            return None
        weights = self._transact(stage, None, None, lambda s: s.weights)
        return None if weights is None else float(weights.get(role, 0))

    # -- MetricSource ----------------------------------------------------------------------------
    def _count(self, window: MetricWindow) -> int:
        seconds = max(0.0, (window.end - window.start).total_seconds())
        n = int(seconds // window.interval_seconds)
        return min(self.scenario.max_samples, max(n, self.scenario.min_samples))

    def _rng(self, *parts: object) -> np.random.Generator:
        import numpy as np  # loaded when samples are drawn, not by every importer of the workflows

        digest = hashlib.sha256("|".join(str(p) for p in (self.scenario.seed, *parts)).encode()).digest()
        return np.random.default_rng(int.from_bytes(digest[:8], "big"))

    def _series(self, stage: StageRef, metric: MetricSpec, window: MetricWindow, role: Role, version: str | None) -> list[float]:
        # the region's traffic: a drained region yields no samples; a region with traffic one per interval (as a
        # metric source scrapes), each over its share of the requests (a loaded region more, a small share fewer,
        # so noisier); an overloaded region is slower and sheds requests
        end = window.end.timestamp()
        self._latest_end = max(end, self._latest_end or end)
        if end < self._latest_end - NO_HISTORY_BEFORE:
            return []  # a window a day back (the guard's history): the simulated fleet did not exist then
        load = self.load.effect(stage, window)
        n = self._count(window) if load.traffic > 0 else 0
        share = self._arm_share(stage, role)  # a weighted arm: its sample count follows its share
        if share is not None:
            n = math.floor(n * min(1.0, share / self.scenario.full_sample_share))
        if n == 0 or version is None:
            return []
        if metric.kind == "throughput":  # requests per interval (the region guard's volume)
            return [float(max(1, round(self.scenario.requests_per_interval * load.traffic)))] * n
        # a primary's looks (the guard, health checks): each window its own draw, the same for the same window. A canary
        # and its baseline, and every draw of a fleet without fresh draws (tests): one draw per stage and version, so a
        # verdict does not depend on the service's random name or the hour it ran (seeded by window, the judge's
        # false-alarm rate, about 0.4% a look, failed healthy rollouts and reverts at random in the full suite)
        rng = (self._rng(stage.service, stage.key, metric.name, role, version, n, window.start.isoformat(),
                         window.end.isoformat()) if role == "primary" and self.scenario.fresh_draws else
               self._rng(stage.key, metric.name, role, version, n) if share is None else
               self._rng(stage.key, metric.name, role, version, n, share, window.start.isoformat()))
        effect = self._effect(stage, version)
        if effect is not None and effect.only_after_promotion and role != "primary":
            effect = None
        lat = effect.latency_factor if effect else 1.0
        err = effect.error_factor if effect else 1.0
        lat *= load.latency_factor
        s = self.scenario
        if metric.kind == "latency":
            mu = math.log(s.base_latency_ms * lat) - s.latency_sigma**2 / 2
            values = rng.lognormal(mu, s.latency_sigma, n)
        elif metric.kind == "error_rate":
            p = min(1.0, s.base_error_rate * err + load.error_rate)
            requests = max(1, round(s.requests_per_interval * load.traffic))
            values = rng.binomial(requests, p, n) / requests
        else:
            values = rng.normal(1.0, 0.05, n)
        return [float(v) for v in values]

    async def fetch_histogram(self, stage: StageRef, metric: MetricSpec, window: MetricWindow, role: Role,
                              version: str) -> Histogram | None:
        """A latency metric's buckets per interval (None unless the scenario has `latency_histograms`): each
        interval's requests (the region's volume) counted into buckets from the same log-normal latency law."""
        if not self.scenario.latency_histograms or metric.kind != "latency":
            return None
        import numpy as np
        from scipy.special import ndtr

        from canary.guard_counts import Histogram

        def draw() -> Histogram:
            volume = self._series(stage, MetricSpec(name=metric.name + ":requests", kind="throughput"), window, role,
                                  version)
            le = [round(10 * 2 ** (k / 4), 3) for k in range(45)]
            if not volume:
                return Histogram(le=le, counts=[])
            effect = self._effect(stage, version)
            if effect is not None and effect.only_after_promotion and role != "primary":
                effect = None
            lat = (effect.latency_factor if effect else 1.0) * self.load.effect(stage, window).latency_factor
            s = self.scenario
            mu = math.log(s.base_latency_ms * lat) - s.latency_sigma**2 / 2
            cdf = ndtr((np.log(np.array(le)) - mu) / s.latency_sigma)
            probs = np.diff(np.concatenate([[0.0], cdf, [1.0]]))
            rng = self._rng("buckets", stage.service, stage.key, metric.name, role, version, window.start.isoformat())
            counts = rng.multinomial(np.array(volume, dtype=np.int64), np.clip(probs, 0, None))
            return Histogram(le=le, counts=counts.astype(float).tolist())

        return await asyncio.to_thread(draw)

    async def fetch(
        self,
        stage: StageRef,
        metric: MetricSpec,
        window: MetricWindow,
        baseline: tuple[Role, str | None],
        canary: tuple[Role, str],
    ) -> MetricSamples:
        def draw() -> MetricSamples:  # reads the traffic model in the fleet's state: off the event loop
            return MetricSamples(
                name=metric.name,
                baseline=self._series(stage, metric, window, *baseline),
                canary=self._series(stage, metric, window, *canary),
            )

        return await asyncio.to_thread(draw)


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE takes the write lock up front (waiting up to the busy timeout): no lost updates."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise

