"""`bifrost demo`: an embedded server and worker, a good rollout and a regressing one, then the region guard
evacuating a degraded region and restoring it once it heals, checked end to end."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.text import Text
from temporalio.client import Client

from activities.adapters.registry import registry_from_targets
from activities.adapters.reports import LocalReportStore
from activities.adapters.simulated import FleetScenario, SimulatedFleet
from activities.adapters.targets import load_targets
from bifrost_cli.demo_guard import guard_act
from bifrost_cli.ops import outcome, start_rollout
from bifrost_cli.render import state_table
from bifrost_cli.traffic import traffic_moves
from worker.build import build_worker
from worker.connect import TASK_QUEUE, connect
from worker.reports_http import ReportServer
from worker.server import port_in_use, start_dev_server
from worker.telemetry import Telemetry, telemetry
from workflows.request import load_request
from workflows.rollout.models import RolloutState
from workflows.rollout.workflow import RolloutWorkflow

EXAMPLES = Path(__file__).resolve().parent.parent / "deploy" / "examples"
FLEET_DB = Path(".bifrost/fleet.db")  # the default of `bifrost worker --fleet-db`, so a worker can join the demo


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _watch(client: Client, ids: list[str], console: Console) -> list[RolloutState]:
    handles = [client.get_workflow_handle_for(RolloutWorkflow.run, i) for i in ids]
    results = [asyncio.ensure_future(outcome(h)) for h in handles]
    with Live(console=console, refresh_per_second=4) as live:
        while not all(r.done() for r in results):
            tables = []
            for h in handles:
                try:
                    tables.append(state_table(await h.query(RolloutWorkflow.status)))
                except Exception:  # noqa: BLE001 - not started yet / worker busy: show next time
                    continue
            live.update(Group(*tables))
            await asyncio.wait(results, timeout=1.0)
        live.update(Group(*(state_table(r.result()) for r in results)))
    console.print()
    return [r.result() for r in results]


async def _run(address: str, console: Console, fleet: SimulatedFleet, reports: LocalReportStore,
               telemetry: Telemetry | None = None) -> bool:
    good, bad = load_request(EXAMPLES / "demo-good.yaml"), load_request(EXAMPLES / "demo-bad.yaml")
    client = await connect(address, "default", **(telemetry.connect_kwargs() if telemetry else {}))
    registry = registry_from_targets(load_targets(EXAMPLES / "simulated-traffic.yaml"), fleet=fleet)
    async with build_worker(client, registry, task_queue=TASK_QUEUE, reports=reports):
        console.print(Text(f"submitting {good.service} {good.version} (healthy) and {bad.version} (regresses latency in "
                      "eu-west-1 prod); one rollout per service at a time, so the second queues behind the first"))
        good_handle = await start_rollout(client, good, TASK_QUEUE)
        while (await good_handle.query(RolloutWorkflow.status)).status == "queued":  # holds the lock: now queue the next
            await asyncio.sleep(0.2)
        bad_handle = await start_rollout(client, bad, TASK_QUEUE)
        first, second = await _watch(client, [good_handle.id, bad_handle.id], console)
        moves = [m for m in await traffic_moves(client, bad.service) if m is not None]
        console.print(Text("the region guard: a region degrades, the guard moves its users away, and back once it heals"))
        guard = await guard_act(client, fleet, good.service, good.version, TASK_QUEUE, console)
    ok_first = first.status == "succeeded" and all(s.version_now == good.version for s in first.stages)
    failing = next((s for s in second.stages if s.verdict == "fail"), None)
    every = all(v["primary"] == good.version for v in fleet.snapshot().values())
    ok_second = (
        second.status == "rolled_back" and failing is not None and failing.key == "eu-west-1/prod"
        and all(s.version_now == good.version for s in second.stages) and every
    )
    evacuated = next((m for m in moves if m.direction == "evacuate"), None)
    restored = next((m for m in moves if m.direction == "restore"), None)
    ok_traffic = (
        evacuated is not None and evacuated.status == "evacuated" and evacuated.region == "eu-west-1"
        and restored is not None and restored.status == "restored" and restored.weights_after == evacuated.weights_before
    )
    traffic = (f"eu-west-1's traffic: {evacuated.weights_before} → evacuated {evacuated.weights_after} → restored "
               f"{restored.weights_after}" if evacuated and restored else f"eu-west-1's traffic: {[m.status for m in moves]}")
    outcome = Text.assemble(
        (f"{first.rollout_id}: {first.status}", "green" if ok_first else "red"), f" — {first.reason}\n",
        (f"{second.rollout_id}: {second.status}", "green" if ok_second else "red"), f" — {second.reason}\n",
        (traffic, "green" if ok_traffic else "red"), "\n",
        (f"region guard: weights {guard.before} → {guard.sick} evacuated {guard.during} → restored {guard.after}"
         + (f" ({guard.problem})" if guard.problem else ""), "green" if guard.ok else "red"), "\n",
        f"canary report: {failing.report_url}\n" if failing and failing.report_url else "",
        f"every region now runs {good.version}: " + ("yes" if every else "NO"),
        f"\nthe worker's metrics (bifrost_* and temporal_*): {telemetry.metrics_url}" if telemetry else "",
    )
    console.print(Panel.fit(outcome, title="demo outcome"))
    return ok_first and ok_second and ok_traffic and guard.ok


def run_demo(*, port: int = 7233, ui_port: int = 8233, keep: bool = False, console: Console | None = None) -> int:
    """Run the demo; 0 only if the good rollout succeeded and the bad one was rolled back everywhere."""
    console = console or Console()
    if port_in_use("127.0.0.1", port) or port_in_use("127.0.0.1", ui_port):
        port, ui_port = _free_port(), _free_port()
        console.print(Text(f"ports busy; using {port} (gRPC) and {ui_port} (UI) instead", style="yellow"))
    db = Path(".bifrost/demo.db")
    db.unlink(missing_ok=True)
    SimulatedFleet.remove_state_file(FLEET_DB)  # a fresh fleet too: every region starts on the scenario's version
    fleet = SimulatedFleet(FleetScenario.load(EXAMPLES / "demo-fleet.yaml"), state_file=FLEET_DB).open()
    console.print(Text("starting the embedded Temporal dev server ..."))
    server = start_dev_server(port=port, ui_port=ui_port, db_file=db, log_file=".bifrost/demo-temporal.log")
    console.print(Text.assemble("Temporal Web UI: ", (str(server.ui_url), "bold"), " (namespace default) — watch the rollouts there"))
    reports_http = ReportServer(Path(".bifrost/reports"), port=0).start()  # a free port: report links open in a browser
    console.print(Text.assemble("canary reports are served at ", (reports_http.url, "bold"), " (the report links in the Web UI)"))
    metrics = telemetry(metrics_port=0)  # a free port; `bifrost worker --metrics-port` does the same for a real worker
    console.print(Text.assemble("the worker's Prometheus metrics are at ", (str(metrics.metrics_url), "bold"),
                                " (bifrost_* and temporal_*; see docs/operating.md)"))
    try:
        console.print(Text(f"simulated fleet state: {FLEET_DB} (recreated on every run)"))
        ok = asyncio.run(_run(server.address, console, fleet, LocalReportStore(reports_http.root, reports_http.url),
                              metrics))
        if keep:
            console.print(Text("server and reports kept running; Ctrl-C to stop"))
            try:
                server.process.wait()
            except KeyboardInterrupt:
                pass
    finally:
        reports_http.close()
        server.stop()
        fleet.close()
    console.print(Text("demo passed", style="green") if ok else Text("demo failed: outcomes were not as expected", style="red"))
    return 0 if ok else 1
