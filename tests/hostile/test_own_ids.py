"""Ids are claims, not proof (issue #29): a workflow whose meaning rests on its id refuses to run under one that says
something its own input does not, whatever started it, before it does anything."""

from __future__ import annotations

import uuid

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.exceptions import ApplicationError

from common.failures import INVALID_PAYLOAD
from tests.workflows.helpers import failed_at_once, fleet, make_request, running_worker
from workflows.provenance import require_own_id
from workflows.rollout.workflow import RolloutWorkflow


def test_the_id_check_admits_only_the_canonical_id_or_a_suffix_of_it_when_asked() -> None:
    require_own_id("rollout/a/1.0.0", "rollout/a/1.0.0", what="x")
    require_own_id("rollout/a/1.0.0/t1", "rollout/a/1.0.0", what="x", suffixed=True)
    for wrong, suffixed in (("rollout/a/1.0.0/t1", False), ("rollout/a/1.0.00", True), ("rollout/b/1.0.0", True),
                            ("rollout/a/1.0.0-x", True), ("xrollout/a/1.0.0", True)):
        with pytest.raises(ApplicationError) as err:
            require_own_id(wrong, "rollout/a/1.0.0", what="a rollout of a 1.0.0", suffixed=suffixed)
        assert err.value.type == INVALID_PAYLOAD and err.value.non_retryable
        assert err.value.message.startswith("workflow id: a rollout of a 1.0.0 must run as 'rollout/a/1.0.0'"), err.value.message


async def test_a_rollout_started_under_an_id_naming_another_version_fails_at_once(env, task_queue):
    """`rollout/<svc>/9.9.9` running 1.0.0 would list, lock and be reverted as 9.9.9: refused before the plan or the lock."""
    client, f = env.client, fleet()
    req = make_request(version="1.0.0")
    async with running_worker(client, f, task_queue):
        h = await client.start_workflow(RolloutWorkflow.run, req, id=f"rollout/{req.service}/9.9.9/{uuid.uuid4().hex[:6]}",
                                        task_queue=task_queue)
        cause = await failed_at_once(h, INVALID_PAYLOAD)
        history = await h.fetch_history()
    assert cause.message.startswith(f"workflow id: a rollout of {req.service} 1.0.0 must run as '{req.workflow_id}'"), cause.message
    kinds = {e.event_type for e in history.events}
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED not in kinds  # no lock asked, nothing deployed
    assert EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED not in kinds
    assert f.calls == []
