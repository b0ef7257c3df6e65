"""The real `bifrost` command reads an aborted rollout (ended Canceled, its state in the memo): `submit --wait` exits 3,
`status` shows it without a worker, `list` names it aborted."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from datetime import UTC, datetime

import yaml

from tests.cli.test_exit_codes import _bifrost
from tests.workflows.helpers import METRICS, fleet, running_worker
from tests.workflows.test_controls import wait_for
from workflows.rollout import RolloutWorkflow
from workflows.updates import Abort


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
