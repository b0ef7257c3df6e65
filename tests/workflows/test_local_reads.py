"""The peer reads on a rollout's critical path run as local activities (workflows/options.py, CONFIRM), only in the
directions that cannot close a wait cycle: a stage asks its rollout, the lock asks a rollout, the traffic gate reads
the record set and asks the evacuation and the guard; the rollout asks its stages and the lock by ordinary activities.
Two workflows asking each other with their tasks open stalled until the tasks timed out: that the rollout's own reads
stay ordinary is what rules it out, and is asserted here. (A timed-out workflow task is not asserted absent: on the
shared 2-core machine a cold stage's first task timed out once at load 20 on main's code too.)"""

from __future__ import annotations

import json
from collections import Counter

from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from activities.peers import PeerAnswer, PeerQuery
from bifrost_cli.ops import outcome
from common.lock import lock_id
from tests.workflows.helpers import fleet, running_worker
from tests.workflows.test_internal_signals import holder_and_queued, rollout_state
from tests.workflows.test_rollout_traffic import held_rollout
from workflows.peer_reads import ask
from workflows.rollout import RolloutWorkflow
from workflows.updates import Approve

LOCAL_MARKER = "core_local_activity"


async def _events(client: Client, workflow_id: str) -> list[HistoryEvent]:
    return [e async for e in client.get_workflow_handle(workflow_id).fetch_history_events()]


def _reads(events: list[HistoryEvent]) -> tuple[Counter[str], Counter[str]]:
    """Activity types scheduled on the server, and activity types run locally (their markers), in one history."""
    scheduled: Counter[str] = Counter()
    local: Counter[str] = Counter()
    for e in events:
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[e.activity_task_scheduled_event_attributes.activity_type.name] += 1
        elif e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED and e.marker_recorded_event_attributes.marker_name == LOCAL_MARKER:
            data = json.loads(e.marker_recorded_event_attributes.details["data"].payloads[0].data)
            local[data["activity_type"]] += 1
    return scheduled, local


async def test_stages_and_the_lock_confirm_locally_and_nothing_stalls(env, task_queue, tmp_path):
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        ha, hb, _ = await holder_and_queued(env.client, task_queue)
        service = (await rollout_state(ha)).service
        await ha.execute_update(RolloutWorkflow.approve, Approve(stage="us-east-1/test", approver="alice"))
        ra, rb = await outcome(ha), await outcome(hb)
        assert (ra.status, rb.status) == ("succeeded", "succeeded")
        stages = [f"{h.id}/{s.key}" for h, r in ((ha, ra), (hb, rb)) for s in r.stages]
        histories = {wid: await _events(env.client, wid) for wid in [ha.id, hb.id, *stages, lock_id(service)]}
    for stage in stages:  # each stage confirmed its rollout's verdict (conclude) by a local query, none on the server
        scheduled, local = _reads(histories[stage])
        assert scheduled["query_workflow"] == 0 and local["query_workflow"] >= 1, (stage, scheduled, local)
    scheduled, local = _reads(histories[lock_id(service)])  # two acquires and two releases, each confirmed locally
    assert scheduled["query_workflow"] == 0 and local["query_workflow"] >= 4, (scheduled, local)
    for rollout in (ha.id, hb.id):  # the other direction stays on the server: the rollout never asks with its task open
        scheduled, local = _reads(histories[rollout])
        assert scheduled["query_workflow"] >= 1 and local["query_workflow"] == 0, (rollout, scheduled, local)
        assert scheduled["region_weights"] == 0 and local["region_weights"] >= 1, (rollout, scheduled, local)


async def test_the_traffic_gate_reads_weights_and_status_locally(env, task_queue, tmp_path):
    run = await held_rollout(env.client, task_queue, tmp_path)
    assert run.result.status == "succeeded", run.result.reason
    events = await _events(env.client, run.rollout_id)
    scheduled, local = _reads(events)
    # it held, then went on: weights read at least twice; where a region has weights, the evacuation's and the
    # guard's status asked too, locally (its `progress` queries of its stages stay ordinary activities)
    assert scheduled["region_weights"] == 0 and local["region_weights"] >= 2, (scheduled, local)
    assert local["query_workflow"] >= 2, (scheduled, local)


@activity.defn(name="query_workflow")
async def _slow_locally(q: PeerQuery) -> PeerAnswer:
    """A peer read that fails when run locally (as a peer that does not answer in time would) and answers otherwise."""
    if activity.info().is_local:
        raise ApplicationError("no answer in time", non_retryable=True)
    return PeerAnswer(found=True, answer={"asked": q.workflow_id})


@workflow.defn(name="AskOnce", sandboxed=False)
class _AskOnce:
    @workflow.run
    async def run(self, workflow_id: str) -> PeerAnswer:
        return await ask(PeerQuery(workflow_id=workflow_id, query="status"), "ask once", local=True)


async def test_a_local_read_that_fails_is_asked_again_by_an_ordinary_activity(env, task_queue):
    async with Worker(env.client, task_queue=task_queue, workflows=[_AskOnce], activities=[_slow_locally]):
        handle = await env.client.start_workflow(_AskOnce.run, "someone", id=f"ask-{task_queue}", task_queue=task_queue)
        answer = await handle.result()
    assert PeerAnswer.model_validate(answer).answer == {"asked": "someone"}
    scheduled, local = _reads(await _events(env.client, handle.id))
    assert local["query_workflow"] == 1 and scheduled["query_workflow"] == 1  # the failed local try, then the server's
