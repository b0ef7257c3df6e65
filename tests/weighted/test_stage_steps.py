"""A weighted canary (canary.traffic) in the stage workflow, on a time-skipping dev server against the simulated fleet:
each step's weights set through the router, judged on its own window; withdrawn to 0 before anything else on a fail."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Replayer

from activities.adapters.simulated import SimulatedFleet
from canary.config import StagePlace
from common.types import Notification
from tests.workflows.helpers import fleet, make_request, running_worker
from tests.workflows.stage_parent import stage_parent_worker, start_stage
from worker.build import WORKFLOWS
from worker.converter import DATA_CONVERTER
from workflows.stage.models import StageDetail, StageInput, StageState

LATENCY = [{"name": "latency_p99", "kind": "latency", "direction": "increase", "allowed_increase": 1.05}]
STEPS = {"router": "simulated", "steps": [5, 25, 50], "baseline_share": "same"}
PLANNED = [{"primary": 90, "canary": 5, "baseline": 5}, {"primary": 50, "canary": 25, "baseline": 25},
           {"primary": 0, "canary": 50, "baseline": 50}]
WITHDRAWN = {"primary": 100, "canary": 0, "baseline": 0}


def stage_input(**canary: Any) -> StageInput:
    req = make_request(canary={"metrics": LATENCY, "analysis_minutes": 10, "interval_seconds": 60,
                               "judge": {"min_samples": 10}, "traffic": STEPS, **canary})
    return StageInput(rollout_id=f"{req.workflow_id}/{uuid.uuid4().hex[:8]}", service=req.service, version=req.version,
                      image=req.image, region="us-east-1", environment="test", canary=req.canary, soak_hours=0,
                      place=StagePlace(index=0, stages=6))


async def run_stage(client: Client, task_queue: str, tmp_path: Path, inp: StageInput, f: SimulatedFleet,
                    notified: list[Notification] | None = None) -> tuple[StageState, StageDetail, list[str]]:
    """Run one stage to its end: its state, its last progress, and the summaries of its activities in order (and,
    into `notified`, the notices it sent)."""
    async with running_worker(client, f, task_queue, tmp_path), stage_parent_worker(client, task_queue):
        handle = await start_stage(client, inp, task_queue)
        try:
            state = await handle.result()
        except WorkflowFailureError as err:
            state = StageState.model_validate(err.cause.details[0])  # type: ignore[attr-defined]
        detail = await handle.query("progress")
    history = await handle.fetch_history()
    await Replayer(workflows=WORKFLOWS, data_converter=DATA_CONVERTER).replay_workflow(history)
    import json
    summaries = [json.loads(e.user_metadata.summary.data) for e in history.events
                 if e.HasField("activity_task_scheduled_event_attributes")]
    if notified is not None:
        notified += [Notification.model_validate_json(e.activity_task_scheduled_event_attributes.input.payloads[0].data)
                     for e in history.events if e.HasField("activity_task_scheduled_event_attributes")
                     and e.activity_task_scheduled_event_attributes.activity_type.name == "notify"]
    return state, StageDetail.model_validate(detail), summaries


def weight_writes(f: SimulatedFleet, key: str = "us-east-1/test") -> list[dict[str, int]]:
    return [e.after for e in f.effects if e.field == "weights" and e.stage_key == key]


async def test_a_good_canary_passes_every_step_in_order_then_goes_back_to_the_primary(ts_env, task_queue, tmp_path):
    f = fleet(min_samples=0)
    notified: list[Notification] = []
    state, detail, summaries = await run_stage(ts_env.client, task_queue, tmp_path, stage_input(), f, notified)
    assert state.status == "succeeded", state.reason
    # each step is told, linking the rollout's run the stage checked it serves (its page, not the latest run's history)
    assert [n.event for n in notified] == ["canary_step"] * 4
    assert detail.rollout_run and {n.run_id for n in notified} == {detail.rollout_run}
    assert weight_writes(f) == [*PLANNED, WITHDRAWN]  # each planned step once, in order; then all to the primary
    assert state.canary_step == 3 and state.canary_steps == 3 and state.withdrawn_at is not None
    judged = [s for s in summaries if s.startswith("judge canary")]
    assert len(judged) >= 3
    # the 5% step yields a quarter of the samples: the judge waits for more instead of deciding on nothing
    # the 5% step yields a quarter of the samples: the judge waits for more instead of deciding on nothing
    assert sum(s.startswith("judge canary us-east-1/test step 1") for s in judged) >= 2, judged
    assert sum(s.startswith("judge canary us-east-1/test step 3") for s in judged) >= 1, judged
    withdraw = summaries.index("withdraw canary in us-east-1/test")
    assert withdraw < summaries.index(next(s for s in summaries if s.startswith("promote")))
    assert [a.action for a in detail.audit if a.action.startswith("canary-")] == [
        "canary-step", "canary-step", "canary-step", "canary-withdrawn"]


async def test_a_failing_step_is_withdrawn_before_the_rollback(ts_env, task_queue, tmp_path):
    inp = stage_input()
    f = fleet(min_samples=0, effects=[{"version": inp.version, "latency_factor": 1.6}])
    state, detail, summaries = await run_stage(ts_env.client, task_queue, tmp_path, inp, f)
    assert state.status == "rolled_back" and state.verdict == "fail", state.reason
    writes = weight_writes(f)
    assert writes[-1] == WITHDRAWN and all(w in PLANNED for w in writes[:-1])
    assert writes[:-1] == PLANNED[:len(writes) - 1]  # in order, none twice
    # weight 0 is the first thing done after the failing verdict: before the rollback touches the canary
    after_verdict = summaries[max(i for i, s in enumerate(summaries) if s.startswith("judge canary")) + 1:]
    assert after_verdict[0] == "withdraw canary in us-east-1/test", after_verdict
    fields = [e.field for e in f.effects if e.stage_key == "us-east-1/test"]
    last = len(fields) - 1
    assert last - fields[::-1].index("weights") < last - fields[::-1].index("canary")  # weight 0, then the canary removed
    withdrawn = [a for a in detail.audit if a.action == "canary-withdrawn"]
    assert len(withdrawn) == 1 and "weight 0 at" in withdrawn[0].detail and state.withdrawn_at is not None
