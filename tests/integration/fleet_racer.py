"""Random promotes and rollbacks on a simulated fleet: the racer of tests/integration/test_simulated_fleet.py.

Run as `python -m tests.integration.fleet_racer DB SEED OPERATIONS RACERS` to race from another process: it
imports only the fleet, then waits until all RACERS processes are ready (a file each beside DB) so they race.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from pathlib import Path

from activities.adapters.simulated import FleetScenario, SimulatedFleet
from common.types import StageRef

PROD = StageRef(service="payments", region="eu-west-1", environment="prod")
TEST = StageRef(service="payments", region="eu-west-1", environment="test")
VERSIONS = ["2.0.0", "2.1.0", "2.2.0"]


async def race(fleet: SimulatedFleet, seed: int, operations: int) -> None:
    """`operations` promotes (60%) and rollbacks of two stages, chosen by `seed`."""
    rnd = random.Random(seed)
    for _ in range(operations):
        stage = rnd.choice([PROD, TEST])
        if rnd.random() < 0.6:
            await fleet.promote(stage, rnd.choice(VERSIONS), "img")
        else:
            await fleet.rollback(stage, rnd.choice(["1.0.0", *VERSIONS, None]), None)


def wait_for_each_other(db: Path, seed: int, racers: int, timeout: float = 60.0) -> None:
    """Say this racer is ready, then wait (bounded) until every racer is."""
    (db.parent / f"ready-{seed}").touch()
    deadline = time.monotonic() + timeout
    while len(list(db.parent.glob("ready-*"))) < racers:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {len(list(db.parent.glob('ready-*')))} of {racers} racers became ready")
        time.sleep(0.01)


if __name__ == "__main__":
    db, seed, operations, racers = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    with SimulatedFleet(FleetScenario(initial_version="1.0.0"), state_file=db) as fleet:
        wait_for_each_other(db, seed, racers)
        asyncio.run(race(fleet, seed, operations))
