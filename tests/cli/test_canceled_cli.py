"""The real `bifrost` command reads an aborted rollout (ended Canceled, its state in the memo): `submit --wait` exits 3,
`status` shows it without a worker, `list` names it aborted; and believes no memo a run's starter gave it."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from datetime import UTC, datetime

import pytest
import yaml
from temporalio import workflow
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import CancelledError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from bifrost_cli.canceled import canceled_outcome
from bifrost_cli.ops import canceled_state, outcome
from common.failures import OUTCOME_MEMO
from tests.cli.test_exit_codes import _bifrost
from tests.workflows.helpers import METRICS, fleet, running_worker
from tests.workflows.test_controls import wait_for
from workflows.rollout.models import RolloutState
from workflows.rollout.updates import Abort
from workflows.rollout.workflow import RolloutWorkflow


async def test_an_aborted_rollout_exits_3_and_status_reads_its_memo_without_a_worker(env, task_queue, tmp_path):
    service = f"canceled-{uuid.uuid4().hex[:8]}"
    today = datetime.now(UTC).date().isoformat()  # frozen today: the rollout waits for its window
    request = tmp_path / "r.yaml"
    request.write_text(yaml.safe_dump({
        "service": service, "version": "2.0.0", "requested_by": "ci",
        "regions": [{"name": "us-east-1", "traffic_share": 1.0, "environments": ["prod"], "freeze_dates": [today]}],
        "blast_radius": {"canary_region": None},
        "canary": {"metrics": METRICS, "analysis_minutes": 0, "judge": {"min_samples": 30}},
    }))
    child_env = {**os.environ, "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
                 "TEMPORAL_NAMESPACE": env.client.namespace, "BIFROST_USER": "ci"}
    rollout_id = f"rollout/{service}/2.0.0"
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        submitted = asyncio.ensure_future(_bifrost("submit", "--wait", "--task-queue", task_queue, str(request), env=child_env))
        async with asyncio.timeout(120):
            while not [wf async for wf in env.client.list_workflows(f"WorkflowId = '{rollout_id}'")]:
                assert not submitted.done(), submitted.result()
                await asyncio.sleep(0.2)
        h = env.client.get_workflow_handle(rollout_id)
        await wait_for(h, lambda s: s.status == "waiting_window", timeout=60)
        await h.execute_update(RolloutWorkflow.abort, Abort(by="erin", reason="customer reports"))
        code, out, err = await submitted
    # the worker has stopped: no query could be answered; the memo of the Canceled run needs none
    status_code, status_out, status_err = await _bifrost("status", rollout_id, "--json", env=child_env)
    list_code, list_out, _ = await _bifrost("list", "--service", service, env=child_env)
    assert code == 3, (code, out, err)
    assert "aborted: aborted by erin: customer reports" in out, out
    assert status_code == 0, (status_out, status_err)
    state = json.loads(status_out)
    assert (state["status"], state["reason"]) == ("aborted", "aborted by erin: customer reports")
    assert list_code == 0 and "aborted" in list_out, list_out


@workflow.defn(name="CanceledWithoutItsOwnMemo")
class CanceledWithoutItsOwnMemo:
    """Registered only here: waits until cancelled and ends Canceled, writing no memo of its own."""

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)


async def test_a_canceled_run_is_not_believed_on_the_memo_its_starter_gave(env, task_queue):
    """Anyone may start a workflow with a memo: the reader takes the final state only from the run's own upsert."""
    fake = RolloutState(rollout_id="rollout/x/1", service="x", version="1", phase="succeeded", status="succeeded",
                        reason="all regions healthy (says whoever started it)")
    async with Worker(env.client, task_queue=task_queue, workflows=[CanceledWithoutItsOwnMemo],
                      workflow_runner=UnsandboxedWorkflowRunner()):
        h = await env.client.start_workflow(CanceledWithoutItsOwnMemo.run, id=f"rollout/fake-{uuid.uuid4().hex[:8]}/1",
                                            task_queue=task_queue, memo={OUTCOME_MEMO: fake.model_dump(mode="json")})
        await h.cancel()
        with pytest.raises(WorkflowFailureError) as raw:
            await h.result()
    desc = await h.describe()
    assert isinstance(raw.value.cause, CancelledError) and desc.status == WorkflowExecutionStatus.CANCELED
    assert await desc.memo_value(OUTCOME_MEMO) == fake.model_dump(mode="json")  # the starter's memo is there...
    assert await canceled_state(h) is None  # ...and is not believed
    assert await canceled_outcome(h, RolloutState) is None
    with pytest.raises(WorkflowFailureError):
        await outcome(h)
