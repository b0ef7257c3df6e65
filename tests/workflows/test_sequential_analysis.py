"""Sequential canary analysis in the stage workflow, on a time-skipping dev server against the simulated fleet.

An inconclusive analysis waits as long again and judges the whole window; the extension shows on the stage's
page and in its state; the history (with the `sequential-canary-analysis` patch) replays."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.worker import Replayer

from canary.config import StagePlace
from tests.workflows.helpers import fleet, make_request, running_worker
from tests.workflows.stage_parent import stage_parent_worker, start_stage
from worker.build import WORKFLOWS
from worker.converter import DATA_CONVERTER
from workflows.stage.models import StageInput, StageState

LATENCY = [{"name": "latency_p99", "kind": "latency", "direction": "increase", "allowed_increase": 1.05}]


def stage_input(judge: dict[str, Any], place: StagePlace | None = StagePlace(index=0, stages=6)) -> StageInput:
    req = make_request(canary={"metrics": LATENCY, "analysis_minutes": 10, "interval_seconds": 60,
                               "judge": {"min_samples": 10, **judge}})
    return StageInput(rollout_id=f"{req.workflow_id}/{uuid.uuid4().hex[:8]}", service=req.service, version=req.version, image=req.image,
                      region="us-east-1", environment="test", canary=req.canary, soak_hours=0, place=place)


async def run_stage(client: Client, task_queue: str, tmp_path: Path, inp: StageInput,
                    latency_factor: float) -> tuple[WorkflowHandle, StageState | WorkflowFailureError, str]:
    """Run one stage to its end: its handle, its result (or failure), and its page (Current Details) at the end."""
    f = fleet(min_samples=0, effects=[{"version": inp.version, "latency_factor": latency_factor}])
    async with running_worker(client, f, task_queue, tmp_path), stage_parent_worker(client, task_queue):
        handle = await start_stage(client, inp, task_queue)  # a stage runs only as its rollout's child
        try:
            outcome: StageState | WorkflowFailureError = await handle.result()
        except WorkflowFailureError as err:
            outcome = err
        meta = await handle.query("__temporal_workflow_metadata")
    page = meta.current_details if hasattr(meta, "current_details") else meta["currentDetails"]
    return handle, outcome, page


async def activities_and_replay(handle: WorkflowHandle) -> list[str]:
    """The analyze_canary summaries in the stage's history, after checking that the history replays."""
    history = await handle.fetch_history()
    await Replayer(workflows=WORKFLOWS, data_converter=DATA_CONVERTER).replay_workflow(history)
    return [json.loads(e.user_metadata.summary.data) for e in history.events
            if e.HasField("activity_task_scheduled_event_attributes")
            and e.activity_task_scheduled_event_attributes.activity_type.name == "analyze_canary"]


async def test_an_inconclusive_canary_extends_then_passes_and_the_page_says_why(ts_env, task_queue, tmp_path):
    # a budget no 10-30 samples can spend (it never fails) and a continuation rule that always asks for more while
    # the mean is 5% up: the analysis must extend up to its limit, then pass on the last look
    inp = stage_input({"rollout_alpha": 1e-9, "extend_below": 1.0, "max_extensions": 2})
    handle, outcome, page = await run_stage(ts_env.client, task_queue, tmp_path, inp, latency_factor=1.5)
    assert isinstance(outcome, StageState), outcome
    assert outcome.status == "succeeded" and outcome.verdict == "pass"
    assert outcome.analysis_looks == 3
    assert outcome.extended.startswith("analysis extended: inconclusive on latency_p99 (p=")
    assert "10 more samples per side (look 3/3)" in outcome.extended
    assert "**Canary analysis:** look 3 — analysis extended: inconclusive on latency\\_p99 (p=" in page, page  # Markdown-escaped
    summaries = await activities_and_replay(handle)
    assert len(summaries) == 3 and summaries[1].endswith("(look 2)")


async def test_an_extension_that_finds_the_regression_fails_and_rolls_back(ts_env, task_queue, tmp_path):
    # 10 samples of a 40% slower canary are suggestive at the first stage's small budget, not conclusive;
    # 20 or 30 are conclusive
    inp = stage_input({})
    handle, outcome, page = await run_stage(ts_env.client, task_queue, tmp_path, inp, latency_factor=1.4)
    assert isinstance(outcome, WorkflowFailureError), outcome
    state = StageState.model_validate(outcome.cause.details[0])  # type: ignore[attr-defined]
    assert state.status == "rolled_back" and state.verdict == "fail"
    assert state.analysis_looks >= 2 and state.extended.startswith("analysis extended: inconclusive on latency_p99")
    assert "latency_p99" in state.reason and "**Canary analysis:** look" in page
    assert len(await activities_and_replay(handle)) == state.analysis_looks


async def test_without_its_place_in_a_rollout_a_stage_judges_once(ts_env, task_queue, tmp_path):
    inp = stage_input({"extend_below": 1.0}, place=None)
    handle, outcome, _ = await run_stage(ts_env.client, task_queue, tmp_path, inp, latency_factor=1.5)
    state = outcome if isinstance(outcome, StageState) else StageState.model_validate(outcome.cause.details[0])  # type: ignore[attr-defined]
    assert state.analysis_looks == 1 and state.extended == ""
    assert len(await activities_and_replay(handle)) == 1
