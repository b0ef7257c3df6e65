"""Every workflow validates its own input, whatever started it (issue #17 item 6): a start from the UI with values
the CLI would refuse fails at once, with one line naming the field, and never waits or wedges."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from common.namespaces import machinery_namespace
from tests.workflows.evacuation_helpers import running_worker, service, simulated_registry

MACHINERY_ONLY = {"StageWorkflow", "ServiceLockWorkflow"}  # run only in the machinery namespace


@pytest.mark.parametrize(("workflow", "payload", "field"), [
    ("EvacuationWorkflow", {"region": "eu-west-1", "requested_by": "ui-user", "extra_wait_seconds": 1e12},
     "extra_wait_seconds"),
    ("EvacuationWorkflow", {"region": "eu-west-1", "requested_by": "ui-user", "require_approval": True,
                            "approval_timeout_minutes": 1e308}, "approval_timeout_minutes"),
    ("ServiceLockWorkflow", {"holder_check_seconds": 1e308}, "holder_check_seconds"),
])
async def test_a_ui_start_with_an_input_out_of_bounds_fails_at_once_naming_the_field(
        env, task_queue, tmp_path, workflow: str, payload: dict[str, Any], field: str):
    where = machinery_namespace(env.client.namespace) if workflow in MACHINERY_ONLY else env.client.namespace
    raw = await Client.connect(env.client.service_client.config.target_host, namespace=where)  # as the UI
    registry, fleet = simulated_registry()
    svc = service()
    async with running_worker(env.client, registry, task_queue, tmp_path):
        h = await raw.start_workflow(workflow, {"service": svc, **payload}, id=f"ui/{svc}/{uuid.uuid4().hex[:6]}",
                                     task_queue=task_queue)
        async with asyncio.timeout(30):  # fails on its first task, instead of waiting 31,700 years
            with pytest.raises(WorkflowFailureError) as failed:
                await h.result()
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidPayload", cause
    assert field in cause.message and "\n" not in cause.message and "too large" not in cause.message
    assert cause.failure is not None and cause.failure.stack_trace == ""
    assert not [c for c in fleet.calls if c[0] in ("scale", "set_weights")]  # nothing moved
