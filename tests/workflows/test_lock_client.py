"""The lock client's handlers (workflows/controls/lock_client.py), written once in `LockHolder` and inherited by every
workflow that takes its service's lock: Temporal registers them from the base class, and a hand-sent lock signal to
an inheriting workflow is ignored with one audit line, as it is to a rollout (tests/workflows/test_internal_signals.py)."""

from __future__ import annotations

import pytest
from temporalio.workflow import _Definition

from bifrost_cli.ops import outcome
from common.lock import LOCK_CLAIM_QUERY, lock_id
from tests.workflows.helpers import fleet, running_worker
from tests.workflows.revert_helpers import revert_input, revert_outcome, start_revert
from tests.workflows.test_internal_signals import ignored, poll
from tests.workflows.test_revert import _released, _running_at_a_gate
from worker.endpoints import machinery_client
from workflows.controls.lock_client import GRANTED_SIGNAL, REFUSED_SIGNAL, SUPERSEDED_SIGNAL, LockHolder
from workflows.lock.workflow import ServiceLockWorkflow
from workflows.revert.workflow import RevertWorkflow
from workflows.rollout.workflow import RolloutWorkflow

# Every workflow that takes its service's lock.
HOLDERS = [RevertWorkflow, RolloutWorkflow]


@pytest.mark.parametrize("cls", HOLDERS)
def test_the_lock_handlers_are_the_one_base_class_s(cls: type) -> None:
    """The workflow registers LockHolder's handlers and writes none of its own under those names."""
    defn = _Definition.must_from_class(cls)
    assert issubclass(cls, LockHolder)
    for signal, handler in ((GRANTED_SIGNAL, LockHolder.lock_granted), (REFUSED_SIGNAL, LockHolder.lock_refused),
                            (SUPERSEDED_SIGNAL, LockHolder.superseded)):
        assert defn.signals[signal].fn is handler, signal
    assert defn.queries[LOCK_CLAIM_QUERY].fn is LockHolder.lock_claim
    own = {"lock_granted", "lock_refused", "superseded", "lock_claim", "_lock_answered"} & set(vars(cls))
    assert own == set(), f"{cls.__name__} writes lock handlers of its own: {own}"


async def test_hand_sent_lock_signals_to_a_queued_revert_change_nothing(env, task_queue):
    client, f = env.client, fleet()
    async with running_worker(client, f, task_queue):
        req, _ = await _released(client, f, task_queue)
        running = await _running_at_a_gate(client, req.service, task_queue)
        h = await start_revert(client, revert_input(req.service, on_conflict="queue"), task_queue)
        lock = machinery_client(client).get_workflow_handle(lock_id(req.service))
        await poll(lambda: lock.query(ServiceLockWorkflow.lock_state), lambda s: [q.workflow_id for q in s.queue] == [h.id])
        before = await h.query(RevertWorkflow.status)
        assert before.status == "queued"
        await h.signal(GRANTED_SIGNAL, req.service)
        await h.signal(REFUSED_SIGNAL, "the change board said no")
        await h.signal(SUPERSEDED_SIGNAL, "9.9.9")
        after = await poll(lambda: h.query(RevertWorkflow.status),
                           lambda s: sum(a.action.startswith("ignored ") for a in s.audit) >= 3)
        assert after.status == "queued" and after.reason == before.reason
        assert ignored(after.audit, GRANTED_SIGNAL)[0].detail == f"the lock's holder is {running.id}"
        assert "has not refused this rollout" in ignored(after.audit, REFUSED_SIGNAL)[0].detail
        assert "has not superseded this rollout" in ignored(after.audit, SUPERSEDED_SIGNAL)[0].detail
        assert not any(a.action in ("lock-granted", "superseded") for a in after.audit)
        claim = await h.query(LOCK_CLAIM_QUERY)
        assert claim["status"] == "waiting" and claim["request"]["workflow_id"] == h.id
        state = await lock.query(ServiceLockWorkflow.lock_state)
        assert state.holder is not None and state.holder.workflow_id == running.id
        assert [q.workflow_id for q in state.queue] == [h.id] and state.refused == {} and state.superseded == {}
        await h.execute_update("abort", {"by": "alice", "reason": "test over"})
        ended, _ = await revert_outcome(h)
        await running.execute_update("abort", {"by": "alice", "reason": "test over"})
        await outcome(running)
    assert ended.status == "aborted" and not any(r.status != "pending" for r in ended.regions)
