"""An aborted or rejected rollout ends Canceled, on a real dev server: the Web UI's default list tells it apart from
one that went wrong (Failed `RolledBack`), and its final state is read from its memo."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle, WorkflowHistory
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.testing import ActivityEnvironment

from activities.peers import CancelRun, PeerActivities
from activities.releases import ReleaseActivities, ReleaseQuery
from bifrost_cli.ops import outcome
from common.failures import OUTCOME_MEMO
from common.lock import LockState
from common.own_memo import own_canceled_state
from tests.workflows.helpers import fleet, make_request, replaced_activity, running_worker, start
from tests.workflows.test_controls import wait_for
from worker.endpoints import machinery_client
from workflows.lock.workflow import ServiceLockWorkflow
from workflows.request import RolloutRequest
from workflows.rollout.models import RolloutState
from workflows.rollout.updates import Abort, Reject, Rollback
from workflows.rollout.workflow import RolloutWorkflow

HISTORIES = Path(__file__).resolve().parent.parent / "histories"
MAX_MEMO_BYTES = 16 * 1024  # the memo comes with every row of a list (the Web UI's, `bifrost list`): keep it small


def waiting_for_its_window(**overrides) -> RolloutRequest:  # type: ignore[no-untyped-def]
    """A rollout that takes the lock and waits for its window (frozen today), changing nothing."""
    today = datetime.now(UTC).date().isoformat()
    return make_request(regions=[{"name": "us-east-1", "traffic_share": 1.0, "freeze_dates": [today], "environments": ["prod"]}],
                        blast_radius={"canary_region": None}, **overrides)


async def events(handle: WorkflowHandle, kind: EventType.ValueType) -> list:  # type: ignore[type-arg]
    return [e async for e in handle.fetch_history_events() if e.event_type == kind]


async def scheduled_activities(handle: WorkflowHandle) -> list[str]:
    return [e.activity_task_scheduled_event_attributes.activity_type.name
            for e in await events(handle, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)]


async def lock_of(client: Client, service: str, timeout: float = 30.0) -> LockState:
    """The service lock's state once it holds nothing (the release is a signal: it may land a moment after the end);
    its state at the deadline otherwise."""
    handle = machinery_client(client).get_workflow_handle(f"service-lock/{service}")
    deadline = asyncio.get_running_loop().time() + timeout
    while (state := await handle.query(ServiceLockWorkflow.lock_state)).holder is not None \
            and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.1)
    return state


@pytest.mark.parametrize("how", ["abort", "rollback"])
async def test_an_aborted_rollout_ends_canceled_with_its_final_state_in_the_memo(env, task_queue, tmp_path, how):
    req = waiting_for_its_window()
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        h = await start(env.client, req, task_queue)
        await wait_for(h, lambda s: s.status == "waiting_window", timeout=60)
        if how == "abort":
            await h.execute_update(RolloutWorkflow.abort, Abort(by="erin", reason="customer reports"))
        else:
            await h.execute_update(RolloutWorkflow.rollback, Rollback(by="erin", reason="customer reports", scope="all"))
        with pytest.raises(WorkflowFailureError) as raw:
            await h.result()
        result = await outcome(h)
        desc = await h.describe()
        memo = await desc.memo_value(OUTCOME_MEMO)
        lock = await lock_of(env.client, req.service)
        # what `bifrost revert` reads of the release (the run's history): the state is the memo the run upserted
        reader = ActivityEnvironment()
        reader.info = dataclasses.replace(reader.info, task_queue=task_queue)  # as the revert's worker would run it
        release = await reader.run(ReleaseActivities(env.client).find_release,
                                   ReleaseQuery(service=req.service, rollout_id=h.id))
    assert isinstance(raw.value.cause, CancelledError), raw.value.cause  # no Failed `Aborted`
    assert (release.found, release.closed_as) == (True, "canceled"), release
    assert RolloutState.model_validate(release.state) == RolloutState.model_validate(memo)
    assert desc.status == WorkflowExecutionStatus.CANCELED
    said = {"abort": "aborted by erin: customer reports", "rollback": "rolled back by erin (scope all): customer reports"}
    assert (result.status, result.reason) == ("aborted", said[how])
    assert RolloutState.model_validate(memo) == result  # the final state, whole
    assert result.ended_at is not None and result.phase == "aborted"
    # the rollout asked once for its own cancellation; the request was not taken as a second abort
    acts = await scheduled_activities(h)
    assert acts.count("cancel_run") == 1 and acts[-1] == "cancel_run", acts
    assert len(await events(h, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED)) == 1
    assert [(a.who, a.action) for a in result.audit if a.who != "bifrost"] == [("ci", "submit"), ("erin", how)]
    assert lock.holder is None, lock


async def test_request_cancellation_ends_canceled_attributed_without_asking_again(env, task_queue, tmp_path):
    req = waiting_for_its_window()
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        h = await start(env.client, req, task_queue)
        await wait_for(h, lambda s: s.status == "waiting_window", timeout=60)
        rm = await Client.connect(env.client.service_client.config.target_host, namespace=env.client.namespace,
                                  identity="rm@example.com")
        await rm.get_workflow_handle(h.id).cancel()  # what the Web UI's Request Cancellation sends
        result = await outcome(h)
        desc = await h.describe()
        lock = await lock_of(env.client, req.service)
    assert desc.status == WorkflowExecutionStatus.CANCELED
    assert result.status == "aborted" and result.reason.startswith("cancellation requested by rm@example.com"), result.reason
    assert "cancel_run" not in await scheduled_activities(h)  # the request had arrived: nothing more to ask
    assert len(await events(h, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED)) == 1
    assert [(a.who, a.action) for a in result.audit if a.who != "bifrost"] == [("ci", "submit"), ("rm@example.com", "cancel")]
    assert lock.holder is None, lock


async def test_a_rejected_rollout_ends_canceled_with_its_state_in_its_memo(env, task_queue, tmp_path):
    req = make_request(approvals={"gates": [{"wave": 1}], "approvers": ["alice"]})
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        h = await start(env.client, req, task_queue)
        await wait_for(h, lambda s: s.status == "awaiting_approval", timeout=60)
        await h.execute_update(RolloutWorkflow.reject, Reject(wave=1, approver="alice", reason="not today"))
        with pytest.raises(WorkflowFailureError) as raw:
            await h.result()
        desc = await h.describe()
        state = await outcome(h)
    assert isinstance(raw.value.cause, CancelledError), raw.value.cause
    assert desc.status == WorkflowExecutionStatus.CANCELED  # not the red Failed of a release that went wrong
    assert state.status == "rejected" and "alice" in state.reason, state.reason
    requests = await events(h, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED)
    assert [e.workflow_execution_cancel_requested_event_attributes.cause for e in requests] == [
        "Bifrost: rejected; the run ends Canceled (its final state is the bifrost_outcome memo)"]


def cancellation_cannot_be_requested() -> contextlib.AbstractContextManager[None]:
    """Workers started inside fail (non-retryably) every request of a workflow's own cancellation."""
    def make(original: Any) -> Any:
        async def failing(self, q: CancelRun) -> None:  # type: ignore[no-untyped-def]
            raise ApplicationError("Temporal refused the cancellation (test)", non_retryable=True)
        return failing
    return replaced_activity(PeerActivities, "cancel_run", make)


async def test_an_abort_whose_cancellation_cannot_be_requested_still_ends_failed_aborted(env, task_queue, tmp_path):
    req = waiting_for_its_window()
    with cancellation_cannot_be_requested():
        async with running_worker(env.client, fleet(), task_queue, tmp_path):
            h = await start(env.client, req, task_queue)
            await wait_for(h, lambda s: s.status == "waiting_window", timeout=60)
            await h.execute_update(RolloutWorkflow.abort, Abort(by="erin", reason="customer reports"))
            with pytest.raises(WorkflowFailureError) as raw:
                await h.result()
            result = await outcome(h)
            lock = await lock_of(env.client, req.service)
    cause = raw.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "Aborted", cause  # as before the patch: never wedged
    assert result.status == "aborted" and result.reason == "aborted by erin: customer reports"
    assert lock.holder is None, lock


def test_the_memo_of_a_full_three_region_rollout_stays_small():
    """The final state of a three-region rollout (six stages, an audit trail) that a client cancelled, as recorded:
    it ended Canceled with its state in its own memo upsert, which must stay under the memo's bound."""
    recorded = json.loads((HISTORIES / "console-cancel-00.json").read_text())
    history = WorkflowHistory.from_json(recorded["workflow_id"], recorded["history"])
    assert history.events[-1].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED
    state = RolloutState.model_validate(own_canceled_state(history.events))
    assert len(state.stages) == 6 and state.status == "aborted" and state.audit
    memo = json.dumps(state.model_dump(mode="json")).encode()  # what end_canceled writes (workflows/controls/ending.py)
    assert len(memo) < MAX_MEMO_BYTES, len(memo)
