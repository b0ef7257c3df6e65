"""Record the workflow histories the replay test replays: `python -m tests.workflows.record_histories [group ...]`.

One dev server, one pass: each group below is a small function that runs its scenarios on a local worker and writes
every workflow's history it needs to tests/histories/<prefix>-NN.json. No group named: every group, and the old
files are deleted first (`--list` shows the groups and the prefixes they write). The recorded histories are the
baseline of the current build (docs/versioning.md): re-record on purpose, after a change that alters the commands
of a recorded path, and say so in the change.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from activities.adapters.registry import registry_from_targets
from activities.adapters.simulated import FleetScenario, SimulatedFleet, VersionEffect
from activities.adapters.targets import parse_targets
from bifrost_cli.ops import outcome, start_rollout
from bifrost_cli.traffic import traffic_outcome
from tests.fakes.kube_api import FakeKubeApi
from tests.workflows import evacuation_helpers as evac
from tests.workflows.helpers import (
    cancel_as_release_manager,
    first_true_answer_unconfirmable,
    fleet,
    make_request,
    running_worker,
    start,
)
from tests.workflows.stage_parent import stage_parent_worker, start_stage
from worker.converter import DATA_CONVERTER
from worker.endpoints import machinery_client
from worker.server import DEV_SERVER_FLAGS, namespace_args
from workflows import search
from workflows.evacuation.models import AbortShift, ApproveShift
from workflows.evacuation.settings import evacuation_id
from workflows.evacuation.workflow import EvacuationWorkflow
from workflows.guard.models import ApproveGuard, StopGuard
from workflows.guard.workflow import RegionGuardWorkflow
from workflows.request import RolloutRequest
from workflows.revert.workflow import RevertWorkflow
from workflows.rollout.updates import Abort, Approve, OverrideWindow, Pause, Reject, ResolveHold, Resume, SkipSoak
from workflows.rollout.workflow import RolloutWorkflow
from workflows.stage.models import StageInput

OUT = Path(__file__).resolve().parent.parent / "histories"
QUEUE = "record"
ONE_REGION: dict[str, Any] = {"regions": [{"name": "us-east-1", "traffic_share": 1.0}],
                              "blast_radius": {"canary_region": None}}


# -- saving ------------------------------------------------------------------------------------------------------
async def _write(client: Client, path: Path, workflow_id: str, run_id: str | None = None) -> None:
    try:  # a rollout, revert, guard or drill (and their traffic changes) in the namespace people open
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    except RPCError as err:  # a stage, its reports and evacuations, the lock: in the machinery namespace
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
        history = await machinery_client(client).get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    path.write_text(json.dumps({"workflow_id": workflow_id, "history": json.loads(history.to_json())}, indent=1))
    print(f"wrote {path.relative_to(OUT.parent.parent)}")


async def save(client: Client, prefix: str, workflow_ids: list[str]) -> None:
    """The latest run of each workflow id, as <prefix>-00.json, -01.json, ..."""
    for i, wid in enumerate(workflow_ids):
        await _write(client, OUT / f"{prefix}-{i:02d}.json", wid)


async def save_runs(client: Client, prefix: str, workflow_id: str) -> None:
    """Every run of one workflow id, oldest first (a continue-as-new chain, a reset)."""
    query = f"WorkflowId = '{workflow_id}'"
    runs = sorted([(wf.start_time, wf.run_id) for c in (client, machinery_client(client))
                   async for wf in c.list_workflows(query)])
    for i, (_, run) in enumerate(runs):
        await _write(client, OUT / f"{prefix}-{i:02d}.json", workflow_id, run)


async def children(client: Client, parent_id: str) -> list[str]:
    """The workflows `parent_id` started: its children in either namespace, and a rollout's stages (started through
    Nexus in the machinery namespace, under `<rollout id>/<region>/<environment>`)."""
    found = {wf.id for c in (client, machinery_client(client))
             async for wf in c.list_workflows(f"ParentWorkflowId = '{parent_id}'")}
    found |= {wf.id async for wf in machinery_client(client).list_workflows(
        f"WorkflowId STARTS_WITH '{parent_id}/' AND WorkflowType = 'StageWorkflow'")}
    return sorted(found)


async def with_children(client: Client, h: WorkflowHandle, *more: str) -> list[str]:
    return [h.id, *await children(client, h.id), *more]


async def wait(handle: WorkflowHandle, pred: Callable[[Any], bool], timeout: float = 300) -> None:
    """Poll a rollout's status query until `pred` holds (a loaded machine runs five waves slowly)."""
    async with asyncio.timeout(timeout):
        while not pred(await handle.query(RolloutWorkflow.status)):
            await asyncio.sleep(0.2)


async def paused_at_the_gate(client: Client, gated: RolloutRequest) -> WorkflowHandle:
    """A rollout gated at wave 3: paused at the gate, approved, held by the pause, resumed, run to the end."""
    h = await start(client, gated, QUEUE)
    await wait(h, lambda s: s.status == "awaiting_approval")
    await h.execute_update(RolloutWorkflow.pause, Pause(by="carol", reason="recording"))
    await h.execute_update(RolloutWorkflow.approve, Approve(wave=3, approver="alice", comment="ok"))
    await wait(h, lambda s: s.status == "paused")
    await h.execute_update(RolloutWorkflow.resume, Resume(by="carol"))
    await outcome(h)
    return h


# -- the groups ---------------------------------------------------------------------------------------------------
async def rollouts(client: Client, tmp: Path) -> None:
    """A good rollout; a regression in the second production region (and the report its canary drew); a gate with
    pause and resume; an abort while a stage analyses (its lock too)."""
    bad = make_request(version="2.0.1")
    f = fleet(effects=[{"version": "2.0.1", "regions": ["us-east-1"], "environments": ["prod"], "latency_factor": 1.6}])
    async with running_worker(client, f, QUEUE, tmp):
        for prefix, req in (("good", make_request()), ("regression", bad)):
            h = await start(client, req, QUEUE)
            await outcome(h)
            await save(client, prefix, await with_children(client, h))
        drawing = await children(client, f"{h.id}/us-east-1/prod")
        await machinery_client(client).get_workflow_handle(drawing[0]).result()
        await save(client, "report", drawing)
        h = await paused_at_the_gate(client, make_request(approvals={"gates": [{"wave": 3}], "approvers": ["alice"]}))
        await save(client, "approval-pause", await with_children(client, h))
        slow = make_request(canary={"analysis_minutes": 5})
        h = await start(client, slow, QUEUE)
        await wait(h, lambda s: s.stage("ap-south-1/test").status == "analyzing")
        await h.execute_update(RolloutWorkflow.abort, Abort(by="erin", reason="recording"))
        await outcome(h)
        await save(client, "abort", await with_children(client, h, f"service-lock/{slow.service}"))


async def soak(client: Client, tmp: Path) -> None:
    """A stage whose soak continues as new twice, run as the child of the tests' stand-in rollout (a stage runs only
    as its rollout's child; a real rollout's stage budget is 4,000 events): every run of the chain."""
    soaking = make_request(canary={"soak_check_minutes": 1 / 60})
    inp = StageInput(rollout_id=f"{soaking.workflow_id}/soak", service=soaking.service, version=soaking.version,
                     image=soaking.image, region="us-east-1", environment="prod", canary=soaking.canary,
                     soak_hours=9 / 3600, history_budget=60)
    async with running_worker(client, fleet(), QUEUE, tmp), stage_parent_worker(client, QUEUE):
        stage = await start_stage(client, inp, QUEUE)
        await stage.result()
    await save_runs(client, "soak-continued", stage.id)


async def signals(client: Client, tmp: Path) -> None:
    """The lock and stages confirming internal signals: forged ones ignored while a gated rollout holds the lock and
    another queues; a regression's stop and roll-back verdicts; a soak ended by skip_soak."""
    async with running_worker(client, fleet(), QUEUE, tmp):
        a = make_request(approvals={"gates": [{"wave": 2}], "approvers": ["alice"]}, **ONE_REGION)
        b = make_request(service=a.service, version="2.1.0", **ONE_REGION)
        ha = await start_rollout(client, a, QUEUE)
        await wait(ha, lambda s: s.status == "awaiting_approval")
        hb = await start_rollout(client, b, QUEUE)
        await wait(hb, lambda s: s.status == "queued")
        await ha.execute_update(RolloutWorkflow.pause, Pause(by="carol", reason="recording"))
        await ha.execute_update(RolloutWorkflow.resume, Resume(by="carol"))
        await hb.signal("lock_granted", a.service)
        await ha.signal("superseded", "9.9.9")
        await machinery_client(client).get_workflow_handle(f"service-lock/{a.service}").signal("release", ha.id)
        await machinery_client(client).get_workflow_handle(f"{ha.id}/us-east-1/test").signal("skip_soak", "mallory")
        await ha.signal("stage_progress", {"key": "us-east-1/prod", "region": "us-east-1", "environment": "prod",
                                           "status": "succeeded", "verdict": "pass"})
        await wait(ha, lambda s: len(s.audit) >= 6)
        await wait(hb, lambda s: any(e.action == "ignored lock_granted" for e in s.audit))
        await ha.execute_update(RolloutWorkflow.approve, Approve(wave=2, approver="alice", comment="ok"))
        await outcome(ha)
        await outcome(hb)
        await save(client, "signals-queue", [*await with_children(client, ha), *await with_children(client, hb),
                                             f"service-lock/{a.service}"])
    f = fleet(effects=[{"version": "2.0.1", "regions": ["us-east-1"], "environments": ["prod"], "latency_factor": 1.6}])
    async with running_worker(client, f, QUEUE, tmp):
        h = await start_rollout(client, make_request(version="2.0.1"), QUEUE)
        await outcome(h)
        await save(client, "signals-regression", await with_children(client, h))
        soaking = make_request(soak={"prod_hours": 2}, canary={"soak_check_minutes": 30}, approvals={"approvers": ["alice"]},
                               regions=[{"name": "us-east-1", "traffic_share": 1.0, "environments": ["prod"]}],
                               blast_radius={"canary_region": None})
        h = await start_rollout(client, soaking, QUEUE)
        await wait(h, lambda s: s.stages[0].status == "soaking")
        await h.execute_update(RolloutWorkflow.skip_soak, SkipSoak(stage="us-east-1/prod", by="alice", reason="recording"))
        await outcome(h)
        await save(client, "signals-skip-soak", await with_children(client, h))


async def lockwait(client: Client, tmp: Path) -> None:
    """A rollout whose true grant could not be confirmed once: ignored, then taken by its own re-check of the lock
    (about 4 minutes: the re-check interval runs in real time)."""
    req = make_request(**ONE_REGION)
    with first_true_answer_unconfirmable() as failed:
        async with running_worker(client, fleet(), QUEUE, tmp):
            h = await start_rollout(client, req, QUEUE)
            result = await outcome(h)
    assert failed == [h.id] and result.status == "succeeded", (failed, result.status, result.reason)
    await save(client, "lockwait-regrant", await with_children(client, h, f"service-lock/{req.service}"))


async def notify(client: Client, tmp: Path) -> None:
    """The notices of a paused, gated (reminded), windowed and queued rollout; a rollout reset while it held the lock
    (granted again, its orphaned stage cancelled); a failed rollout resubmitted (done waves skip their gate); an
    evacuation telling its start, steps and end."""
    async with running_worker(client, fleet(), QUEUE, tmp):
        today = datetime.now(UTC).date()
        frozen = [str(today + timedelta(days=d)) for d in (-1, 0, 1)]
        a = make_request(regions=[{"name": "us-east-1", "traffic_share": 0.5},
                                  {"name": "eu-west-1", "traffic_share": 0.5, "freeze_dates": frozen}],
                         blast_radius={"canary_region": None},
                         approvals={"gates": [{"wave": 2}], "approvers": ["alice"], "remind_every_minutes": 0.05,
                                    "max_reminders": 2})
        b = make_request(service=a.service, version="2.1.0", **ONE_REGION)
        ha = await start_rollout(client, a, QUEUE)
        await ha.execute_update(RolloutWorkflow.pause, Pause(by="carol", reason="recording"))
        hb = await start_rollout(client, b, QUEUE)
        await wait(ha, lambda s: s.status == "paused")
        await wait(hb, lambda s: any(e.action == "queued" for e in s.audit) or s.status == "queued", 60)
        await asyncio.sleep(12)  # recording only: long enough for the queued notice (10 s) to be in the history
        await ha.execute_update(RolloutWorkflow.resume, Resume(by="carol"))
        await wait(ha, lambda s: s.status == "awaiting_approval")
        await asyncio.sleep(7)  # recording only: two reminders at 3 s
        await ha.execute_update(RolloutWorkflow.approve, Approve(wave=2, approver="alice", comment="ok"))
        await wait(ha, lambda s: s.status == "waiting_window")
        overridden: set[str] = set()
        async with asyncio.timeout(300):  # one override per wave whose window is closed, until the rollout ends
            while not (state := await ha.query(RolloutWorkflow.status)).finished:
                stage = next((s.key for s in state.stages if s.wave == state.current_wave), "")
                if state.status == "waiting_window" and stage not in overridden:
                    overridden.add(stage)
                    await ha.execute_update(RolloutWorkflow.override_window,
                                            OverrideWindow(stage=stage, by="alice", reason="recording"))
                await asyncio.sleep(0.2)
        await outcome(ha)
        await outcome(hb)
        await save(client, "notify-holds", [*await with_children(client, ha), hb.id, f"service-lock/{a.service}"])

        r = make_request(approvals={"gates": [{"wave": 2}]}, **ONE_REGION)
        hr = await start_rollout(client, r, QUEUE)
        await wait(hr, lambda s: s.status == "awaiting_approval")
        history = await hr.fetch_history()
        first = next(e.event_id for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
        resp = await client.workflow_service.reset_workflow_execution(ResetWorkflowExecutionRequest(
            namespace=client.namespace, workflow_execution=WorkflowExecution(workflow_id=hr.id, run_id=history.run_id),
            reason="recording", request_id=str(uuid.uuid4()), workflow_task_finish_event_id=first))
        new_run = client.get_workflow_handle_for(RolloutWorkflow.run, hr.id, run_id=resp.run_id)
        await wait(new_run, lambda s: s.status == "awaiting_approval")
        await new_run.execute_update(RolloutWorkflow.approve, Approve(wave=2, approver="alice"))
        await outcome(new_run)
        await save_runs(client, "reset-holding", hr.id)
        await save(client, "reset-holding-stage", [*await children(client, hr.id), f"service-lock/{r.service}"])
    failing = fleet(effects=[{"version": "2.0.0", "regions": ["eu-west-1"], "environments": ["test"], "fail_deploy": True}])
    async with running_worker(client, failing, QUEUE, tmp):
        q = make_request(rollback_scope="stage", approvals={"gates": [{"wave": 2}]})
        hq = await start_rollout(client, q, QUEUE)
        await wait(hq, lambda s: s.status == "awaiting_approval")
        await hq.execute_update(RolloutWorkflow.approve, Approve(wave=2, approver="alice"))
        await outcome(hq)
        failing.scenario.effects = []
        await outcome(await start_rollout(client, q, QUEUE))
        await save_runs(client, "resubmit-done-waves", hq.id)
    registry, _ = evac.simulated_registry()
    async with evac.running_worker(client, registry, QUEUE, tmp):
        he = await evac.start(client, evac.evacuation(evac.service()), QUEUE)
        await he.result()
        await save(client, "notify-traffic", [he.id])


async def holds(client: Client, tmp: Path) -> None:
    """Stages held on failure: retried (the fleet recovered), promoted (a sibling told to hold until then), timed out
    into rollback; an evacuate_and_hold stage whose traffic moves away while it holds and returns before the retry."""
    slow = VersionEffect(version="2.0.0", regions=["us-east-1"], environments=["test"], latency_factor=1.8)
    held: dict[str, Any] = {"regions": [{"name": "us-east-1", "traffic_share": 1.0, "on_failure": "hold"}],
                            "blast_radius": {"canary_region": None}, "approvals": {"approvers": ["alice"]}}
    f = fleet(effects=[slow])
    async with running_worker(client, f, QUEUE, tmp):
        h = await start_rollout(client, make_request(**held), QUEUE)
        await wait(h, lambda s: s.status == "held")
        f.scenario.effects = []
        await h.execute_update(RolloutWorkflow.resolve_hold,
                               ResolveHold(stage="us-east-1/test", action="retry", by="alice", reason="recording"))
        await outcome(h)
        await save(client, "hold-retry", await with_children(client, h))
        f.scenario.effects = [slow]
        req = make_request(regions=[{"name": "us-east-1", "environments": ["test"], "on_failure": "hold"},
                                    {"name": "eu-west-1", "environments": ["test"]}],
                           blast_radius={"canary_region": None, "max_parallel_regions": 2})
        h = await start_rollout(client, req, QUEUE)
        await wait(h, lambda s: s.status == "held")
        await h.execute_update(RolloutWorkflow.resolve_hold,
                               ResolveHold(stage="us-east-1/test", action="promote", by="bob", reason="recording"))
        await outcome(h)
        await save(client, "hold-promote", await with_children(client, h))
        req = make_request(**{**held, "hold": {"timeout_minutes": 0.05}})
        h = await start_rollout(client, req, QUEUE)
        await outcome(h)
        await save(client, "hold-timeout", await with_children(client, h, f"service-lock/{req.service}"))
    registry, traffic_fleet = evac.simulated_registry()
    req = make_request(regions=[{"name": "us-east-1", "traffic_share": 0.5},
                                {"name": "eu-west-1", "traffic_share": 0.3, "on_failure": "evacuate_and_hold"},
                                {"name": "ap-south-1", "traffic_share": 0.2}],
                       evacuation={"steps": [50, 0], "health_check_minutes": 0.02, "health_interval_seconds": 1,
                                   "min_samples": 3})
    traffic_fleet.scenario.effects.append(
        VersionEffect(version=req.version, regions=["eu-west-1"], environments=["prod"], latency_factor=1.6))
    async with evac.running_worker(client, registry, QUEUE, tmp):
        h = await start_rollout(client, req, QUEUE)
        await wait(h, lambda s: s.status == "held")
        traffic_fleet.scenario.effects = []
        await h.execute_update(RolloutWorkflow.resolve_hold,
                               ResolveHold(stage="eu-west-1/prod", action="retry", by="alice", reason="recording"))
        await outcome(h)
        await save(client, "hold-evacuate", await with_children(client, h))
        await save_runs(client, "hold-evacuate-traffic", evacuation_id(req.service))


async def traffic(client: Client, tmp: Path) -> None:
    """A rollout holding its wave while its region is drained; a stage whose canary window a traffic change
    overlapped, judged again on a fresh window (with the evacuation)."""
    from tests.workflows.test_rollout_traffic import held_rollout, rejudged_rollout

    held = await held_rollout(client, QUEUE, tmp)
    assert held.result.status == "succeeded", held.result.reason
    await save(client, "traffic-hold", [held.rollout_id, *await children(client, held.rollout_id)])
    again = await rejudged_rollout(client, QUEUE, tmp)
    assert again.result.status == "succeeded", again.result.reason
    assert any(a["action"] == "window-discarded" for a in again.stage_audit), again.stage_audit
    await save(client, "traffic-rejudge", [again.rollout_id, *await children(client, again.rollout_id), again.evacuation_id])


async def controls(client: Client, tmp: Path) -> None:
    """The shared controls' shapes: a gated rollout paused at the gate, and an evacuation awaiting approval,
    paused and resumed."""
    async with running_worker(client, fleet(), QUEUE, tmp):
        gated = make_request(service="controls", approvals={"gates": [{"wave": 3}], "approvers": ["alice"]})
        h = await paused_at_the_gate(client, gated)
        await save(client, "controls-rollout", await with_children(client, h))
    registry, _ = evac.simulated_registry(ttl=1)
    async with evac.running_worker(client, registry, QUEUE, tmp):
        e = await evac.start(client, evac.evacuation("controls", require_approval=True), QUEUE)
        await evac.wait_for(e, lambda s: s.status == "awaiting_approval")
        await e.execute_update(EvacuationWorkflow.pause, Pause(by="carol", reason="recording"))
        await e.execute_update(EvacuationWorkflow.approve, ApproveShift(approver="alice", comment="ok"))
        await evac.wait_for(e, lambda s: s.status == "paused")
        await e.execute_update(EvacuationWorkflow.resume, Resume(by="carol"))
        await e.result()
        await save(client, "controls-evacuation", [e.id])


async def evacuations(client: Client, tmp: Path) -> None:
    """An evacuation approved, paused and resumed, then its restore; one without pre-warm whose alarm reverts it;
    nested (two regions out, one restored); health looks whose reports ReportWorkflows draw."""
    registry, _ = evac.simulated_registry(ttl=1)
    async with evac.running_worker(client, registry, QUEUE, tmp):
        h = await evac.start(client, evac.evacuation("recorded", require_approval=True), QUEUE)
        await evac.wait_for(h, lambda s: s.status == "awaiting_approval")
        await h.execute_update(EvacuationWorkflow.pause, Pause(by="carol", reason="recording"))
        await h.execute_update(EvacuationWorkflow.approve, ApproveShift(approver="alice", comment="ok"))
        await evac.wait_for(h, lambda s: s.status == "paused")
        await h.execute_update(EvacuationWorkflow.resume, Resume(by="carol"))
        evacuated = await h.result()
        await save(client, "evacuation-approved", [h.id])
        h = await evac.start(client, evacuated.restore_input(requested_by="bob"), QUEUE)
        await h.result()
        await save(client, "evacuation-restore", [h.id])
        h = await evac.start(client, evac.evacuation("recorded-alarm", prewarm=False), QUEUE)
        await h.result()
        await save(client, "evacuation-alarm", [h.id])
        eu = await (await evac.start(client, evac.evacuation("nested"), QUEUE)).result()
        ap = await (await evac.start(client, evac.evacuation("nested", region="ap-south-1", home_weights=eu.home_weights),
                                     QUEUE)).result()
        await save(client, "evacuation-nested-evacuate", [ap.workflow_id])
        h = await evac.start(client, eu.restore_input(requested_by="bob"), QUEUE)
        await h.result()
        await save(client, "evacuation-nested-restore", [h.id])
        h = await evac.start(client, evac.evacuation("recorded-reports", steps=[50, 0]), QUEUE)
        state = await h.result()
        assert state.status == "evacuated" and all(st.reports for st in state.steps), state.steps
        await save(client, "evacuation-reports", [h.id])


async def evacuation_hpa(client: Client, tmp: Path) -> None:
    """Pre-warm raising HPA floors on the fake Kubernetes API: an evacuation, its restore, an abort that puts them back."""
    with FakeKubeApi(tick_seconds=0.02) as kube:
        targets = evac.simulated_targets(ttl=1)
        for t in targets["targets"]:
            ns = f"shop-{t['region']}"
            t["deployer"] = {"kind": "kubernetes", "api_url": kube.url, "namespace": ns, "poll_seconds": 0.05}
            for svc in ("recorded-hpa", "recorded-hpa-abort"):
                kube.seed_primary(ns, svc, "registry.example.com/app:1.0.0", replicas=4)
                kube.seed_hpa(ns, svc, svc, min_replicas=2, max_replicas=20)
        registry = registry_from_targets(parse_targets(targets), SimulatedFleet(FleetScenario(fresh_draws=False, min_samples=60)))
        async with evac.running_worker(client, registry, QUEUE, tmp):
            h = await evac.start(client, evac.evacuation("recorded-hpa"), QUEUE)
            evacuated = await h.result()
            assert evacuated.raised, evacuated.reason
            await save(client, "evacuation-hpa-evacuate", [h.id])
            h = await evac.start(client, evacuated.restore_input(requested_by="bob"), QUEUE)
            await h.result()
            await save(client, "evacuation-hpa-restore", [h.id])
            h = await evac.start(client, evac.evacuation("recorded-hpa-abort"), QUEUE)
            await evac.wait_for(h, lambda s: s.step == 1 and s.status == "shifting")
            await h.execute_update(EvacuationWorkflow.abort, AbortShift(by="carol", reason="recording"))
            await traffic_outcome(h)
            await save(client, "evacuation-hpa-abort", [h.id])


async def guard(client: Client, tmp: Path) -> None:
    """One region guard chain (it continues as new every 3 looks): a degraded region proposed, paused and resumed,
    approved, evacuated, healed and restored after the hold-down, then stopped: every run."""
    from tests.workflows.test_guard import fleet_with, guard_input
    from tests.workflows.test_guard import start as start_guard
    from tests.workflows.test_guard import wait_for as wait_guard

    registry, f = fleet_with({"eu-west-1": 3.0})
    async with evac.running_worker(client, registry, QUEUE, tmp):
        h = await start_guard(client, guard_input("recorded", rules={"mode": "propose"}, looks_per_run=3), QUEUE)
        await wait_guard(h, lambda s: bool(s.proposals))
        await h.execute_update(RegionGuardWorkflow.pause, Pause(by="carol", reason="recording"))
        await h.execute_update(RegionGuardWorkflow.resume, Resume(by="carol"))
        await h.execute_update(RegionGuardWorkflow.approve, ApproveGuard(region="eu-west-1", approver="alice"))
        await wait_guard(h, lambda s: any(d.action == "evacuated" for d in s.decisions))
        f.scenario.effects.clear()
        await wait_guard(h, lambda s: any(d.action == "restored" for d in s.decisions))
        await h.execute_update(RegionGuardWorkflow.stop, StopGuard(by="alice", reason="recorded"))
        await h.result()
        await save_runs(client, "guard", h.id)


async def canceled(client: Client, tmp: Path) -> None:
    """Runs that end Canceled: a rollout aborted while a stage analyses (it asks for its own cancellation), one
    cancelled by a client at its window and one at its last gate (each names who asked), an evacuation aborted by
    hand and one cancelled (named), both at their first step; a revert cancelled while queued (named)."""
    from tests.workflows.revert_helpers import revert_input, revert_outcome, start_revert
    from tests.workflows.test_canceled import waiting_for_its_window
    from tests.workflows.test_revert import _released, _running_at_a_gate

    f = fleet()
    async with running_worker(client, f, QUEUE, tmp):
        h = await start(client, make_request(canary={"analysis_minutes": 5}), QUEUE)
        await wait(h, lambda s: s.stage("ap-south-1/test").status == "analyzing")
        await h.execute_update(RolloutWorkflow.abort, Abort(by="erin", reason="recording"))
        assert (await outcome(h)).status == "aborted"
        assert (await h.describe()).status == WorkflowExecutionStatus.CANCELED
        await save(client, "canceled-abort", await with_children(client, h))
        h = await start(client, waiting_for_its_window(), QUEUE)
        await wait(h, lambda s: s.status == "waiting_window")
        await cancel_as_release_manager(client, h.id)
        assert (await outcome(h)).status == "aborted"
        await save(client, "canceled-request", [h.id])
        h = await start(client, make_request(approvals={"gates": [{"wave": 6}]}), QUEUE)
        await wait(h, lambda s: s.status == "awaiting_approval")
        await cancel_as_release_manager(client, h.id)
        ended = await outcome(h)
        assert ended.reason.startswith("cancellation requested by rm@example.com"), ended.reason
        await save(client, "console-cancel", await with_children(client, h))
        h = await start(client, make_request(approvals={"gates": [{"wave": 2}], "approvers": ["alice"]}), QUEUE)
        await wait(h, lambda s: s.status == "awaiting_approval")
        await h.execute_update(RolloutWorkflow.reject, Reject(wave=2, approver="alice", reason="recorded"))
        assert (await outcome(h)).status == "rejected"  # ended Canceled, its state in its memo
        await save(client, "canceled-rejected", await with_children(client, h))
        req, _ = await _released(client, f, QUEUE)
        running = await _running_at_a_gate(client, req.service, QUEUE)
        r = await start_revert(client, revert_input(req.service, on_conflict="queue"), QUEUE)
        async with asyncio.timeout(60):
            while (await r.query(RevertWorkflow.status)).status != "queued":
                await asyncio.sleep(0.2)
        await cancel_as_release_manager(client, r.id)
        state, _ = await revert_outcome(r)
        assert state.reason.startswith("cancellation requested by rm@example.com"), state.reason
        await save(client, "cancel-named-revert", [r.id])
        await running.terminate("recorded")
    registry, _ = evac.simulated_registry(ttl=2)
    async with evac.running_worker(client, registry, QUEUE, tmp):
        e = await evac.start(client, evac.evacuation("recorded-cancel"), QUEUE)
        await evac.wait_for(e, lambda s: s.step == 1)
        await e.execute_update(EvacuationWorkflow.abort, AbortShift(by="dave", reason="recording"))
        ev, _ = await traffic_outcome(e)
        assert ev is not None and ev.status == "aborted"
        assert (await e.describe()).status == WorkflowExecutionStatus.CANCELED
        await save(client, "canceled-evacuation", [e.id])
        e = await evac.start(client, evac.evacuation("recorded-named"), QUEUE)
        await evac.wait_for(e, lambda s: s.step == 1)
        await cancel_as_release_manager(client, e.id)
        ev, _ = await traffic_outcome(e)
        assert ev is not None and "cancellation requested by rm@example.com" in ev.reason, ev
        await save(client, "cancel-named-evacuation", [e.id])


async def reverts(client: Client, tmp: Path) -> None:
    """A revert that evacuated a production region and brought its traffic back (with its evacuation's runs); one
    refused while a rollout runs; one aborted while queued (ends Canceled); one queued behind the rollout, which
    undoes it once it ends."""
    from tests.workflows.revert_helpers import listed_closed, revert_input, revert_outcome, start_revert

    quick = {"steps": [0], "health_interval_seconds": 1, "min_samples": 3, "health_check_minutes": 1 / 60}
    registry, _ = evac.simulated_registry(ttl=1)
    async with evac.running_worker(client, registry, QUEUE, tmp):
        req = make_request(evacuation=quick)
        await outcome(await start_rollout(client, req, QUEUE))
        await listed_closed(client, req.workflow_id)
        h = await start_revert(client, revert_input(req.service, evacuate=True, stages=["eu-west-1/prod", "eu-west-1/test"]),
                               QUEUE)
        state, _ = await revert_outcome(h)
        assert state.status == "reverted", state.reason
        await save(client, "revert-reverted", [h.id])
        await save_runs(client, "revert-evacuation", evacuation_id(req.service))
        gated = make_request(service=req.service, version="2.1.0", approvals={"gates": [{"wave": 2}]})
        running = await start_rollout(client, gated, QUEUE)
        await wait(running, lambda s: s.status == "awaiting_approval", 60)
        refused = await start_revert(client, revert_input(req.service, to_version="1.0.0", reason="recorded while 2.1.0 runs"),
                                     QUEUE)
        state, _ = await revert_outcome(refused)
        assert state.status == "rejected", state.reason
        await save(client, "revert-refused", [refused.id])
        aborted = await start_revert(client, revert_input(req.service, to_version="1.0.0", on_conflict="queue",
                                                          reason="recorded aborted while queued"), QUEUE)
        async with asyncio.timeout(60):
            while (await aborted.query(RevertWorkflow.status)).status != "queued":
                await asyncio.sleep(0.2)
        await aborted.execute_update("abort", {"by": "carol", "reason": "recorded"})
        state, _ = await revert_outcome(aborted)
        assert state.status == "aborted", state.reason
        assert (await aborted.describe()).status == WorkflowExecutionStatus.CANCELED
        await save(client, "revert-aborted", [aborted.id])
        queued = await start_revert(client, revert_input(req.service, to_version="1.0.0", on_conflict="queue",
                                                         reason="recorded queued behind 2.1.0"), QUEUE)
        async with asyncio.timeout(60):  # its queued notice goes out after QUEUED_NOTICE_AFTER
            while not any(a.action == "queued" for a in (await queued.query(RevertWorkflow.status)).audit):
                await asyncio.sleep(0.2)
        await running.execute_update(RolloutWorkflow.approve, Approve(wave=2, approver="bob", comment="recorded"))
        await outcome(running)
        state, _ = await revert_outcome(queued)
        assert state.status == "reverted", state.reason
        await save(client, "revert-queued", [queued.id])


@dataclass(frozen=True)
class Group:
    """A recording function and the history prefixes it writes (<prefix>-NN.json)."""

    run: Callable[[Client, Path], Awaitable[None]]
    prefixes: tuple[str, ...]


async def weighted(client: Client, tmp: Path) -> None:
    """Weighted canary steps (canary.traffic) on the simulated router: every step passes; a step fails and the
    canary is withdrawn to weight 0 before the rollback."""
    steps = {"analysis_minutes": 0.02, "judge": {"min_samples": 10},
             "traffic": {"router": "simulated", "steps": [5, 25, 50]}}
    bad = make_request(version="2.0.1", canary=steps)
    f = fleet(effects=[{"version": "2.0.1", "regions": ["us-east-1"], "environments": ["prod"], "latency_factor": 1.6}])
    async with running_worker(client, f, QUEUE, tmp):
        for prefix, req in (("weighted-good", make_request(canary=steps)), ("weighted-regression", bad)):
            h = await start(client, req, QUEUE)
            await outcome(h)
            await save(client, prefix, await with_children(client, h))


GROUPS: dict[str, Group] = {
    "rollouts": Group(rollouts, ("good", "regression", "report", "approval-pause", "abort")),
    "soak": Group(soak, ("soak-continued",)),
    "signals": Group(signals, ("signals-queue", "signals-regression", "signals-skip-soak")),
    "lockwait": Group(lockwait, ("lockwait-regrant",)),
    "notify": Group(notify, ("notify-holds", "reset-holding", "reset-holding-stage", "resubmit-done-waves",
                             "notify-traffic")),
    "holds": Group(holds, ("hold-retry", "hold-promote", "hold-timeout", "hold-evacuate", "hold-evacuate-traffic")),
    "traffic": Group(traffic, ("traffic-hold", "traffic-rejudge")),
    "controls": Group(controls, ("controls-rollout", "controls-evacuation")),
    "evacuations": Group(evacuations, ("evacuation-approved", "evacuation-restore", "evacuation-alarm",
                                       "evacuation-nested-evacuate", "evacuation-nested-restore", "evacuation-reports")),
    "evacuation-hpa": Group(evacuation_hpa, ("evacuation-hpa-evacuate", "evacuation-hpa-restore", "evacuation-hpa-abort")),
    "guard": Group(guard, ("guard",)),
    "canceled": Group(canceled, ("canceled-abort", "canceled-request", "console-cancel", "canceled-rejected", "cancel-named-revert",
                                 "canceled-evacuation", "cancel-named-evacuation")),
    "reverts": Group(reverts, ("revert-reverted", "revert-evacuation", "revert-refused", "revert-aborted", "revert-queued")),
    "weighted": Group(weighted, ("weighted-good", "weighted-regression")),
}


def _forget(names: list[str], everything: bool) -> None:
    """Delete the old recordings: all of them, or those of the named groups' prefixes."""
    OUT.mkdir(exist_ok=True)
    if everything:
        old = list(OUT.glob("*.json"))
    else:
        old = [p for n in names for prefix in GROUPS[n].prefixes for p in OUT.glob(f"{prefix}-[0-9][0-9].json")]
    for path in old:
        path.unlink()


async def record(names: list[str]) -> None:
    """Start one dev server and record the named groups on it, in order."""
    _forget(names, everything=set(names) == set(GROUPS))
    temporal = str(Path(sys.executable).parent / "temporal")
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=temporal, search_attributes=search.ALL,
                                                data_converter=DATA_CONVERTER,
                                                dev_server_extra_args=[*DEV_SERVER_FLAGS, *namespace_args("default")])
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name in names:
                print(f"-- {name}")
                await GROUPS[name].run(env.client, Path(tmp))
    finally:
        await env.shutdown()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.workflows.record_histories", description=__doc__.split("\n")[0])
    parser.add_argument("groups", nargs="*", metavar="group", help="groups to record (default: all)")
    parser.add_argument("--list", action="store_true", help="list the groups and the history prefixes each writes")
    args = parser.parse_args(argv)
    if args.list:
        for name, group in GROUPS.items():
            print(f"{name:15} {', '.join(group.prefixes)}")
        return
    unknown = [n for n in args.groups if n not in GROUPS]
    if unknown:
        parser.error(f"unknown group(s) {', '.join(unknown)}; --list shows them")
    asyncio.run(record(args.groups or list(GROUPS)))


if __name__ == "__main__":
    main(sys.argv[1:])
