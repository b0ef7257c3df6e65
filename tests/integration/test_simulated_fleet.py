"""The simulated fleet's SQLite state: idempotent operations, calls and effects, one fleet for every opener of a file.

The racing tests check serialisability: however threads or processes interleave, the call log (written in the
same transaction as each change) replayed one by one on a fresh fleet gives the same state and the same effects.
"""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from activities.adapters.base import DeployError
from activities.adapters.simulated import FleetScenario, SimulatedFleet, VersionEffect
from activities.adapters.targets import load_targets
from canary.config import MetricSpec
from common.types import MetricWindow, StageRef
from tests.integration.fleet_racer import PROD, TEST, race
from worker.main import build_fleet, build_registry

BIFROST = str(Path(sys.executable).parent / "bifrost")


def primary_changes(fleet: SimulatedFleet, stage: StageRef | None = None) -> list[tuple[str, object, object]]:
    return [(e.operation, e.before, e.after) for e in fleet.effects
            if e.field == "primary" and (stage is None or e.stage_key == stage.key)]


async def test_promote_twice_switches_once_and_reports_the_same_predecessor(tmp_path: Path):
    with SimulatedFleet(FleetScenario(initial_version="1.0.0"), state_file=tmp_path / "fleet.db") as f:
        assert await f.current_version(PROD) == "1.0.0"
        await f.deploy(PROD, "canary", "2.0.0", "img:2.0.0", 1)
        await f.deploy(PROD, "canary", "2.0.0", "img:2.0.0", 1)  # a retried deploy: a call, no second effect
        assert await f.promote(PROD, "2.0.0", "img:2.0.0") == "1.0.0"
        assert await f.promote(PROD, "2.0.0", "img:2.0.0") == "1.0.0"  # retried after a lost reply: same answer
        assert f.calls == [("deploy_canary", "eu-west-1/prod", "2.0.0")] * 2 + [("promote", "eu-west-1/prod", "2.0.0")] * 2
        assert primary_changes(f) == [("promote", "1.0.0", "2.0.0")]
        assert [(e.field, e.before, e.after) for e in f.effects] == [("canary", None, "2.0.0"), ("primary", "1.0.0", "2.0.0")]
        assert f.slot(PROD).history == ["1.0.0"]


async def test_rollback_and_cleanup_are_idempotent_and_only_changes_are_effects(tmp_path: Path):
    f = SimulatedFleet(FleetScenario(initial_version="1.0.0"), state_file=tmp_path / "fleet.db")
    await f.deploy(PROD, "baseline", "1.0.0", None, 1)
    await f.deploy(PROD, "canary", "2.0.0", "img", 1)
    await f.promote(PROD, "2.0.0", "img")
    await f.rollback(PROD, "1.0.0", "img:1.0.0")
    await f.rollback(PROD, "1.0.0", "img:1.0.0")  # already on 1.0.0: a no-op
    await f.cleanup(PROD)
    await f.rollback(PROD, None, None)  # nothing to go back to: only canary and baseline would go, and they are gone
    assert [c[0] for c in f.calls] == ["deploy_baseline", "deploy_canary", "promote", "rollback", "rollback", "cleanup", "rollback"]
    assert [(e.operation, e.field, e.before, e.after) for e in f.effects] == [
        ("deploy_baseline", "baseline", None, "1.0.0"),
        ("deploy_canary", "canary", None, "2.0.0"),
        ("promote", "primary", "1.0.0", "2.0.0"),
        ("rollback", "primary", "2.0.0", "1.0.0"),
        ("rollback", "canary", "2.0.0", None),
        ("rollback", "baseline", "1.0.0", None),
    ]
    assert f.slot(PROD).history == [] and f.snapshot() == {
        "payments/eu-west-1/prod": {"primary": "1.0.0", "canary": None, "baseline": None}}
    f.close()


async def test_a_failing_deploy_is_a_call_without_an_effect(tmp_path: Path):
    scenario = FleetScenario(effects=[VersionEffect(version="2.0.0", fail_deploy=True)])
    with SimulatedFleet(scenario, state_file=tmp_path / "fleet.db") as f:
        with pytest.raises(DeployError, match="simulated deploy failure") as info:
            await f.deploy(PROD, "canary", "2.0.0", "img", 1)
        assert info.value.retryable is False
        assert f.calls == [("deploy_canary", "eu-west-1/prod", "2.0.0")] and f.effects == []


async def test_a_second_opener_of_the_file_sees_the_same_fleet(tmp_path: Path):
    db = tmp_path / "state" / "fleet.db"  # the folder is created
    first = SimulatedFleet(FleetScenario(initial_version="1.0.0"), state_file=db)
    await first.promote(PROD, "2.0.0", "img")
    await first.deploy(TEST, "canary", "2.0.0", "img", 1)
    second = SimulatedFleet(FleetScenario(initial_version="9.9.9"), state_file=db)  # its initial version is for new stages
    assert await second.current_version(PROD) == "2.0.0" and second.snapshot() == first.snapshot()
    await second.rollback(PROD, "1.0.0", "img:1.0.0")  # the history written by `first` is what rolls back
    assert await first.current_version(PROD) == "1.0.0" and first.slot(PROD).history == []
    assert first.calls == second.calls and first.effects == second.effects
    first.close()
    second.close()
    reopened = SimulatedFleet(state_file=db)  # after both closed: the file alone holds the state
    assert reopened.snapshot()["payments/eu-west-1/test"]["canary"] == "2.0.0"
    assert primary_changes(reopened, PROD) == [("promote", "1.0.0", "2.0.0"), ("rollback", "2.0.0", "1.0.0")]
    reopened.close()


async def test_without_a_file_each_fleet_has_its_own_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    a, b = SimulatedFleet(), SimulatedFleet()
    await a.promote(PROD, "2.0.0", "img")
    assert a.where == "memory" and await b.current_version(PROD) == "1.0.0" and b.calls == []
    assert list(tmp_path.iterdir()) == []  # nothing written to disk


async def test_the_metric_samples_do_not_depend_on_where_the_state_lives(tmp_path: Path):
    metric = MetricSpec(name="latency_p99", kind="latency")
    start = datetime(2026, 1, 1, tzinfo=UTC)
    window = MetricWindow(start=start, end=start + timedelta(minutes=10), interval_seconds=10)
    on_file = SimulatedFleet(FleetScenario(seed=3), state_file=tmp_path / "fleet.db")
    samples = await on_file.fetch(PROD, metric, window, ("baseline", "1.0.0"), ("canary", "2.0.0"))
    again = await SimulatedFleet(FleetScenario(seed=3)).fetch(PROD, metric, window, ("baseline", "1.0.0"), ("canary", "2.0.0"))
    other = await SimulatedFleet(FleetScenario(seed=4)).fetch(PROD, metric, window, ("baseline", "1.0.0"), ("canary", "2.0.0"))
    assert len(samples.canary) == 60 and samples == again and samples.canary != other.canary


# -- racing writers ------------------------------------------------------------------------------------
async def _replay(calls: list[tuple[str, str, str]]) -> SimulatedFleet:
    """The call log applied one at a time to a fresh in-memory fleet: the serial order the racers must match."""
    stages = {PROD.key: PROD, TEST.key: TEST}
    serial = SimulatedFleet()
    for op, key, version in calls:
        if op == "promote":
            await serial.promote(stages[key], version, "img")
        else:
            await serial.rollback(stages[key], None if version == "-" else version, None)
    return serial


async def _assert_serialisable(db: Path, expected_calls: int) -> None:
    shared = SimulatedFleet(state_file=db)
    calls = shared.calls
    assert len(calls) == expected_calls  # no call lost
    serial = await _replay(calls)
    strip = [(e.operation, e.stage_key, e.field, e.before, e.after) for e in serial.effects]
    assert [(e.operation, e.stage_key, e.field, e.before, e.after) for e in shared.effects] == strip
    assert shared.snapshot() == serial.snapshot()
    for stage in (PROD, TEST):
        assert shared.slot(stage) == serial.slot(stage)  # history included
        changes = primary_changes(shared, stage)
        assert all(a[2] == b[1] for a, b in zip(changes, changes[1:], strict=False))  # each change starts where the last ended
    shared.close()


async def test_threads_on_two_fleets_sharing_a_file_never_lose_an_update(tmp_path: Path):
    db = tmp_path / "fleet.db"
    fleets = [SimulatedFleet(FleetScenario(initial_version="1.0.0"), state_file=db) for _ in range(2)]
    errors: list[BaseException] = []

    def racer(i: int) -> None:
        try:
            asyncio.run(race(fleets[i % 2], seed=i, operations=60))
        except BaseException as err:  # noqa: BLE001 - reported by the assertion below
            errors.append(err)

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and not any(t.is_alive() for t in threads)
    await _assert_serialisable(db, expected_calls=6 * 60)
    for f in fleets:
        f.close()


@pytest.mark.process
async def test_processes_sharing_a_file_never_lose_an_update(tmp_path: Path):
    db = tmp_path / "fleet.db"
    SimulatedFleet(state_file=db).open().close()  # the schema exists before the racers start
    root = Path(__file__).resolve().parents[2]
    procs = [subprocess.Popen([sys.executable, "-m", "tests.integration.fleet_racer", str(db), str(100 + i), "80", "3"],
                              cwd=root) for i in range(3)]
    try:
        assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    await _assert_serialisable(db, expected_calls=3 * 80)
    shared = SimulatedFleet(state_file=db)
    assert len({e.pid for e in shared.effects}) == 3  # the changes really came from every process
    shared.close()


# -- the file, as a worker opens it -------------------------------------------------------------------
def test_a_file_that_is_not_a_fleet_database_is_refused_naming_it(tmp_path: Path):
    bad = tmp_path / "fleet.yaml"
    bad.write_text("seed: 1\n" * 200)
    with pytest.raises(DeployError, match=f"simulated fleet state {bad}: file is not a database") as info:
        SimulatedFleet(state_file=bad).open()
    assert info.value.retryable is False

    newer = tmp_path / "newer.db"
    with sqlite3.connect(newer) as conn:
        conn.execute("PRAGMA user_version=99")
    with pytest.raises(DeployError, match="schema version 99.*delete the file or choose another"):
        SimulatedFleet(state_file=newer).open()


@pytest.mark.process
def test_the_worker_refuses_a_bad_fleet_db_before_connecting(tmp_path: Path):
    bad = tmp_path / "notes.txt"
    bad.write_text("not a database\n" * 100)
    res = subprocess.run([BIFROST, "worker", "--fleet-db", str(bad)], capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert res.returncode == 2, res.stderr
    said = " ".join(res.stderr.split())  # rich wraps long lines
    assert f"worker not started: simulated fleet state {bad}: file is not a database; check the path" in said
    assert "Traceback" not in res.stderr


def test_a_worker_whose_targets_never_use_the_fleet_creates_no_file(tmp_path: Path):
    targets = tmp_path / "targets.yaml"
    targets.write_text("targets:\n  - {region: us-east-1, environment: prod, metrics: {kind: simulated}}\n")
    db = tmp_path / "fleet.db"
    fleet = build_fleet(None, db)
    registry = build_registry(fleet, load_targets(targets))
    assert registry.metrics(StageRef(service="s", region="us-east-1", environment="prod")) is fleet
    assert not db.exists()  # metrics need no state: a read-only root filesystem is fine

    registry = build_registry(fleet, None)  # the fleet deploys everything: opened, and the file made, at once
    assert registry.default_deployer is fleet and db.exists()
    fleet.close()


def test_remove_state_file_removes_the_wal_too(tmp_path: Path):
    db = tmp_path / "fleet.db"
    f = SimulatedFleet(state_file=db)
    asyncio.run(f.promote(PROD, "2.0.0", "img"))
    assert (tmp_path / "fleet.db-wal").exists()  # WAL mode, with the connection still open
    f.close()
    (tmp_path / "fleet.db-wal").write_bytes(b"stale")  # as a killed process might leave it
    SimulatedFleet.remove_state_file(db)
    assert sorted(tmp_path.iterdir()) == []
