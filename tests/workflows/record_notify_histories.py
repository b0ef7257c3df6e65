"""Record the histories of the notices and of a reset: `python -m tests.workflows.record_notify_histories`.

- notify-holds: a rollout paused, then at a gate with reminders, then at a closed window (override); a second
  version queued behind it long enough for `rollout_queued`; both to the end (patches notify-*).
- reset-holding: a rollout reset to its first task while it held the lock at a gate; the new run gets the lock
  again and cancels its orphaned stage (patches lock-regrant-to-waiting-holder, stage-start-waits-for-previous-run).
- resubmit-done-waves: a rollout (scope stage) failed at its third wave, resubmitted: the waves already on the
  version skip their gate (patch gates-skip-waves-already-done).
- notify-traffic: an evacuation that tells its start, each step and its end (patch notify-traffic-moves).
"""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest

from bifrost_cli.ops import outcome, start_rollout
from tests.workflows import evacuation_helpers as evac
from tests.workflows.helpers import fleet, make_request, running_worker
from tests.workflows.record_histories import _children, _save, _save_runs, _wait, start_recording
from tests.workflows.record_signal_histories import ONE_REGION
from workflows.rollout import RolloutWorkflow
from workflows.updates import Approve, OverrideWindow, Pause, Resume

GROUPS = ("notify-holds", "reset-holding", "notify-traffic", "resubmit-done-waves")


async def record() -> None:
    env = await start_recording(GROUPS)
    client = env.client
    try:
        async with running_worker(client, fleet(), "record"):
            today = datetime.now(UTC).date()
            frozen = [str(today + timedelta(days=d)) for d in (-1, 0, 1)]
            a = make_request(regions=[{"name": "us-east-1", "traffic_share": 0.5},
                                      {"name": "eu-west-1", "traffic_share": 0.5, "freeze_dates": frozen}],
                             blast_radius={"canary_region": None},
                             approvals={"gates": [{"wave": 2}], "approvers": ["alice"], "remind_every_minutes": 0.05,
                                        "max_reminders": 2})
            b = make_request(service=a.service, version="2.1.0", **ONE_REGION)
            ha = await start_rollout(client, a, "record")
            await ha.execute_update(RolloutWorkflow.pause, Pause(by="carol", reason="recording"))
            hb = await start_rollout(client, b, "record")
            await _wait(ha, lambda s: s.status == "paused")
            await asyncio.sleep(12)  # recording only: long enough for the queued notice (10 s) to be in the history
            await ha.execute_update(RolloutWorkflow.resume, Resume(by="carol"))
            await _wait(ha, lambda s: s.status == "awaiting_approval")
            await asyncio.sleep(7)  # recording only: two reminders at 3 s
            await ha.execute_update(RolloutWorkflow.approve, Approve(wave=2, approver="alice", comment="ok"))
            await _wait(ha, lambda s: s.status == "waiting_window")
            await ha.execute_update(RolloutWorkflow.override_window,
                                    OverrideWindow(stage=ha_stage(ha_state := await ha.query(RolloutWorkflow.status)),
                                                   by="alice", reason="recording"))
            await _wait(ha, lambda s: s.status in ("waiting_window", "running", "succeeded") and s.current_wave != ha_state.current_wave)
            state = await ha.query(RolloutWorkflow.status)
            if state.status == "waiting_window":
                await ha.execute_update(RolloutWorkflow.override_window,
                                        OverrideWindow(stage=ha_stage(state), by="alice", reason="recording"))
            await outcome(ha)
            await outcome(hb)
            await _save(client, "notify-holds", [ha.id, *await _children(client, ha.id), hb.id, f"service-lock/{a.service}"])

            r = make_request(approvals={"gates": [{"wave": 2}]}, **ONE_REGION)
            hr = await start_rollout(client, r, "record")
            await _wait(hr, lambda s: s.status == "awaiting_approval")
            history = await hr.fetch_history()
            first = next(e.event_id for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
            resp = await client.workflow_service.reset_workflow_execution(ResetWorkflowExecutionRequest(
                namespace=client.namespace, workflow_execution=WorkflowExecution(workflow_id=hr.id, run_id=history.run_id),
                reason="recording", request_id=str(uuid.uuid4()), workflow_task_finish_event_id=first))
            new_run = client.get_workflow_handle_for(RolloutWorkflow.run, hr.id, run_id=resp.run_id)
            await _wait(new_run, lambda s: s.status == "awaiting_approval")
            await new_run.execute_update(RolloutWorkflow.approve, Approve(wave=2, approver="alice"))
            await outcome(new_run)
            await _save_runs(client, "reset-holding", hr.id)
            await _save(client, "reset-holding-stage", [*await _children(client, hr.id), f"service-lock/{r.service}"])
        failing = fleet(effects=[{"version": "2.0.0", "regions": ["eu-west-1"], "environments": ["test"],
                                  "fail_deploy": True}])
        async with running_worker(client, failing, "record"):
            q = make_request(rollback_scope="stage", approvals={"gates": [{"wave": 2}]})
            hq = await start_rollout(client, q, "record")
            await _wait(hq, lambda s: s.status == "awaiting_approval")
            await hq.execute_update(RolloutWorkflow.approve, Approve(wave=2, approver="alice"))
            await outcome(hq)
            failing.scenario.effects = []
            await outcome(await start_rollout(client, q, "record"))
            await _save_runs(client, "resubmit-done-waves", hq.id)
        registry, _ = evac.simulated_registry()
        with tempfile.TemporaryDirectory() as tmp:
            async with evac.running_worker(client, registry, "record-traffic", Path(tmp)):
                he = await evac.start(client, evac.evacuation(evac.service()), "record-traffic")
                await he.result()
                await _save(client, "notify-traffic", [he.id])
    finally:
        await env.shutdown()


def ha_stage(state) -> str:  # type: ignore[no-untyped-def]
    """The first stage of the wave waiting for its window."""
    return next(s.key for s in state.stages if s.wave == state.current_wave)


if __name__ == "__main__":
    asyncio.run(record())
