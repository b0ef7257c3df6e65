"""A stage's origin check (activities/origin.py) on a real dev server: it reads its rollout's history newest first
and stops at the operation that started the stage, so its cost does not grow with every stage the rollout ran
before; a run the rollout never started is refused after reading the whole history."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

import activities.origin as origin
from bifrost_cli.ops import outcome
from tests.workflows.helpers import fleet, make_request, running_worker, start
from worker.endpoints import machinery_client

pytestmark = pytest.mark.integration


async def test_the_origin_check_reads_back_only_to_the_operation_that_started_the_stage(
        env: Any, task_queue: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    req = make_request(soak={"test_hours": 0, "prod_hours": 0})
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        rollout = await start(env.client, req, task_queue)
        assert (await outcome(rollout)).status == "succeeded"
    machinery = machinery_client(env.client)
    stages = [w async for w in machinery.list_workflows(f"WorkflowType = 'StageWorkflow' AND WorkflowId STARTS_WITH "
                                                          f"'{req.workflow_id}/'")]
    assert len(stages) == 6
    history = [e async for e in rollout.fetch_history_events()]
    read: list[int] = []
    real = origin.newest_first

    async def counted(client: Client, workflow_id: str, run_id: str, page: int = 10) -> AsyncIterator[HistoryEvent]:
        async for event in real(client, workflow_id, run_id, page=10):  # small pages: the stop must be exact
            read[-1] += 1
            yield event

    monkeypatch.setattr(origin, "newest_first", counted)
    scheduled = {e.event_id: e for e in history if e.HasField("nexus_operation_scheduled_event_attributes")}
    for s in stages:
        read.append(0)
        found = await origin.find_origin(env.client, origin.OriginQuery(rollout_id=rollout.id, stage_id=s.id,
                                                                         run_id=s.run_id, task_queue=task_queue))
        assert found.ok and found.rollout_run_id == rollout.result_run_id, found
        started = next(e for e in history if e.HasField("nexus_operation_started_event_attributes")
                       and any(link.workflow_event.run_id == s.run_id for link in e.links))
        op = scheduled[started.nexus_operation_started_event_attributes.scheduled_event_id]
        assert read[-1] == len(history) - op.event_id + 1, (s.id, read[-1], len(history), op.event_id)
    # at the stage's start the operation is the rollout's newest: the check reads a page, not what came before
    read.append(0)
    forged = await origin.find_origin(env.client, origin.OriginQuery(rollout_id=rollout.id, stage_id=stages[0].id,
                                                                      run_id="not-a-run", task_queue=task_queue))
    assert not forged.ok and "started no run not-a-run" in forged.why
    assert read[-1] == len(history)  # a no reads it all
