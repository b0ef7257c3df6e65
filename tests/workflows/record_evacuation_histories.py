"""Record evacuation histories for the replay test: `python -m tests.workflows.record_evacuation_histories`.

Writes tests/histories/evacuation-*.json: an approved, paused and resumed evacuation followed by its
restore, and an evacuation without pre-warm whose alarm reverts it; `... nested` records only
evacuation-nested-*.json: two regions evacuated, then one restored while the other stays evacuated; `... hpa`
records only evacuation-hpa-*.json: receivers scaled by HPAs on the fake Kubernetes API (their floors raised
and put back by the restore, and by an abort); `... reports` records only evacuation-reports-*.json: an evacuation
whose health looks name their reports and have ReportWorkflows draw them (patch evacuation-health-reports).
Re-record only on purpose (the replay test exists to catch changes that would break evacuations already running). `record_histories` runs it too.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

from temporalio.client import Client

from activities.adapters.registry import registry_from_targets
from activities.adapters.simulated import FleetScenario, SimulatedFleet
from activities.adapters.targets import parse_targets
from tests.fakes.kube_api import FakeKubeApi
from tests.workflows.evacuation_helpers import (
    REGIONS,
    evacuation,
    running_worker,
    simulated_registry,
    simulated_targets,
    start,
    wait_for,
)
from tests.workflows.record_histories import start_recording
from workflows.evacuation import EvacuationWorkflow
from workflows.traffic_models import AbortShift, ApproveShift
from workflows.updates import Pause, Resume

OUT = Path(__file__).resolve().parent.parent / "histories"


async def _save(client: Client, name: str, workflow_id: str) -> None:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    path = OUT / f"{name}.json"
    path.write_text(json.dumps({"workflow_id": workflow_id, "history": json.loads(history.to_json())}, indent=1))
    print(f"wrote {path.relative_to(OUT.parent.parent)}")


async def record() -> None:
    env = await start_recording(("evacuation-approved", "evacuation-restore", "evacuation-alarm"))
    try:
        registry, _ = simulated_registry(ttl=1)
        with tempfile.TemporaryDirectory() as tmp:
            async with running_worker(env.client, registry, "record", Path(tmp)):
                h = await start(env.client, evacuation("recorded", require_approval=True), "record")
                await wait_for(h, lambda s: s.status == "awaiting_approval")
                await h.execute_update(EvacuationWorkflow.pause, Pause(by="carol", reason="recording"))
                await h.execute_update(EvacuationWorkflow.approve, ApproveShift(approver="alice", comment="ok"))
                await wait_for(h, lambda s: s.status == "paused")
                await h.execute_update(EvacuationWorkflow.resume, Resume(by="carol"))
                evacuated = await h.result()
                await _save(env.client, "evacuation-approved-00", h.id)
                h = await start(env.client, evacuated.restore_input(requested_by="bob"), "record")
                await h.result()
                await _save(env.client, "evacuation-restore-00", h.id)
                h = await start(env.client, evacuation("recorded-alarm", prewarm=False), "record")
                await h.result()
                await _save(env.client, "evacuation-alarm-00", h.id)
    finally:
        await env.shutdown()


async def record_nested() -> None:
    """A restore planned from the weights now, leaving another evacuated region alone (issue #17 item 3)."""
    env = await start_recording(("evacuation-nested",))
    try:
        registry, _ = simulated_registry(ttl=1)
        with tempfile.TemporaryDirectory() as tmp:
            async with running_worker(env.client, registry, "record", Path(tmp)):
                eu = await (await start(env.client, evacuation("nested"), "record")).result()
                ap = await (await start(env.client, evacuation("nested", region="ap-south-1",
                                                               home_weights=eu.home_weights), "record")).result()
                await _save(env.client, "evacuation-nested-evacuate-01", f"{ap.workflow_id}")
                h = await start(env.client, eu.restore_input(requested_by="bob"), "record")
                await h.result()
                await _save(env.client, "evacuation-nested-restore-01", h.id)
    finally:
        await env.shutdown()


async def record_hpa() -> None:
    """Pre-warm raising HPA floors (issue #19 item 6): an evacuation, its restore, and an abort that puts them back."""
    env = await start_recording(("evacuation-hpa",))
    try:
        with FakeKubeApi(tick_seconds=0.02) as kube, tempfile.TemporaryDirectory() as tmp:
            targets = simulated_targets(ttl=1)
            for t in targets["targets"]:
                ns = f"shop-{t['region']}"
                t["deployer"] = {"kind": "kubernetes", "api_url": kube.url, "namespace": ns, "poll_seconds": 0.05}
                for svc in ("recorded-hpa", "recorded-hpa-abort"):
                    kube.seed_primary(ns, svc, "registry.example.com/app:1.0.0", replicas=4)
                    kube.seed_hpa(ns, svc, svc, min_replicas=2, max_replicas=20)
            registry = registry_from_targets(parse_targets(targets), SimulatedFleet(FleetScenario(fresh_draws=False, min_samples=60)))
            assert len(REGIONS) == 3
            async with running_worker(env.client, registry, "record", Path(tmp)):
                h = await start(env.client, evacuation("recorded-hpa"), "record")
                evacuated = await h.result()
                assert evacuated.raised, evacuated.reason
                await _save(env.client, "evacuation-hpa-evacuate-00", h.id)
                h = await start(env.client, evacuated.restore_input(requested_by="bob"), "record")
                await h.result()
                await _save(env.client, "evacuation-hpa-restore-00", h.id)
                h = await start(env.client, evacuation("recorded-hpa-abort"), "record")
                await wait_for(h, lambda s: s.step == 1 and s.status == "shifting")
                await h.execute_update(EvacuationWorkflow.abort, AbortShift(by="carol", reason="recording"))
                await h.result()
                await _save(env.client, "evacuation-hpa-abort-00", h.id)
    finally:
        await env.shutdown()


async def record_reports() -> None:
    env = await start_recording(("evacuation-reports",))
    try:
        registry, _ = simulated_registry(ttl=1)
        with tempfile.TemporaryDirectory() as tmp:
            async with running_worker(env.client, registry, "record", Path(tmp)):
                h = await start(env.client, evacuation("recorded-reports", steps=[50, 0]), "record")
                state = await h.result()
                assert state.status == "evacuated" and all(st.reports for st in state.steps), state.steps
                await _save(env.client, "evacuation-reports-00", h.id)
    finally:
        await env.shutdown()


if __name__ == "__main__":
    runs = {"nested": record_nested, "hpa": record_hpa, "reports": record_reports}
    asyncio.run(runs[sys.argv[1]]() if sys.argv[1:] else record())
