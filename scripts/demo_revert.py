"""Show a revert: release payments 2.0.0 everywhere, then undo it with `bifrost revert --evacuate` (about a minute).

    .venv/bin/python scripts/demo_revert.py [--keep]

Starts its own Temporal dev server (free ports; the Web UI address is printed) and a worker on the demo's
simulated fleet and traffic (every region starts on 1.9.0). It rolls out deploy/examples/demo-good.yaml (its
health checks compressed as demo-bad.yaml's are), then runs what `bifrost revert payments --to 1.9.0 --evacuate
--wait` runs: every region back on 1.9.0 in reverse wave order, no canary or soak, each production region's traffic
moved away first and back after, each region judged against its own window before the revert. Exits 0 only if
every region ends on 1.9.0 with its traffic back.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from temporalio.client import Client  # noqa: E402

from activities.adapters.registry import registry_from_targets  # noqa: E402
from activities.adapters.simulated import FleetScenario, SimulatedFleet  # noqa: E402
from activities.adapters.targets import load_targets  # noqa: E402
from bifrost_cli.ops import outcome, start_rollout  # noqa: E402
from bifrost_cli.revert import revert_input, run_revert  # noqa: E402
from bifrost_cli.traffic import traffic_moves  # noqa: E402
from worker.build import build_worker  # noqa: E402
from worker.connect import TASK_QUEUE, connect  # noqa: E402
from worker.server import start_dev_server  # noqa: E402
from workflows.request import load_request  # noqa: E402

EXAMPLES = ROOT / "deploy" / "examples"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _listed_closed(client: Client, workflow_id: str, timeout: float = 30) -> None:
    """Wait until the visibility list shows the rollout closed."""
    async with asyncio.timeout(timeout):
        while not [wf async for wf in client.list_workflows(f"WorkflowId = '{workflow_id}' AND ExecutionStatus != 'Running'")]:
            await asyncio.sleep(0.2)


async def demo(address: str, fleet: SimulatedFleet) -> bool:
    release = load_request(EXAMPLES / "demo-good.yaml")
    release = release.model_copy(update={"evacuation": load_request(EXAMPLES / "demo-bad.yaml").evacuation})
    client = await connect(address, "default")
    registry = registry_from_targets(load_targets(EXAMPLES / "simulated-traffic.yaml"), fleet=fleet)
    async with build_worker(client, registry, task_queue=TASK_QUEUE, reports_dir=".bifrost/reports"):
        print(f"rolling out {release.service} {release.version} (every region runs 1.9.0) ...", flush=True)
        done = await outcome(await start_rollout(client, release, TASK_QUEUE))
        print(f"{done.rollout_id}: {done.status}; now: bifrost revert payments --to 1.9.0 --evacuate --wait", flush=True)
        await _listed_closed(client, done.rollout_id)  # the revert finds its release in the list
        inp = revert_input({"service": release.service, "to_version": "1.9.0", "requested_by": "demo", "evacuate": True,
                            "reason": "demo: a bug found after the release", "health_minutes": 0.05})
        code = await run_revert(inp, wait=True, task_queue=TASK_QUEUE)
        moves = [m for m in await traffic_moves(client, release.service) if m is not None]
    every = {k: v["primary"] for k, v in fleet.snapshot().items()}
    back = all(m.status in ("evacuated", "restored") for m in moves) and len(moves) == 2 * 3
    print(f"every region's primary now: {every}")
    print(f"traffic moves: {[(m.direction, m.region, m.status) for m in moves]}")
    return code == 0 and set(every.values()) == {"1.9.0"} and back


def main() -> int:
    port, ui_port = _free_port(), _free_port()
    db, fleet_db = Path(".bifrost/revert-demo.db"), Path(".bifrost/revert-demo-fleet.db")
    db.unlink(missing_ok=True)
    SimulatedFleet.remove_state_file(fleet_db)
    fleet = SimulatedFleet(FleetScenario.load(EXAMPLES / "demo-fleet.yaml"), state_file=fleet_db).open()
    server = start_dev_server(port=port, ui_port=ui_port, db_file=db, log_file=".bifrost/revert-demo-temporal.log")
    os.environ["TEMPORAL_ADDRESS"], os.environ["TEMPORAL_NAMESPACE"] = server.address, "default"
    print(f"Temporal Web UI: {server.ui_url} (namespace default)", flush=True)
    try:
        ok = asyncio.run(demo(server.address, fleet))
        if "--keep" in sys.argv[1:]:
            print("server kept running; Ctrl-C to stop", flush=True)
            try:
                server.process.wait()
            except KeyboardInterrupt:
                pass
    finally:
        server.stop()
        fleet.close()
    print("revert demo passed" if ok else "revert demo failed: outcomes were not as expected")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
