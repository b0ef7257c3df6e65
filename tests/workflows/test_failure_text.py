"""What the Web UI shows of a failed stage and rollout (their result, their events) carries no Python frames or paths."""

from __future__ import annotations

import pytest
from google.protobuf.json_format import MessageToJson
from temporalio.client import Client, WorkflowFailureError

from activities.adapters.simulated import VersionEffect
from tests.workflows.helpers import fleet, make_request, running_worker, start
from worker.endpoints import machinery_client

FRAMES = ("Traceback", 'File "', '.py"', ".py:", "site-packages")


async def _family(client: Client, rollout_id: str) -> list[str]:
    """The rollout and every workflow it started (stages, reports: in the machinery namespace)."""
    ids = [rollout_id]
    async for wf in machinery_client(client).list_workflows(f"WorkflowId STARTS_WITH '{rollout_id}/'"):
        ids.append(wf.id)
    return ids


async def test_a_failing_stage_and_its_rollout_show_no_python_frames(env, task_queue):
    f = fleet(effects=[VersionEffect(version="2.0.0", regions=["eu-west-1"], fail_deploy=True)])
    req = make_request()
    async with running_worker(env.client, f, task_queue):
        h = await start(env.client, req, task_queue)
        with pytest.raises(WorkflowFailureError) as raised:
            await h.result()
    assert "never became available" in str(raised.value.cause)
    failures: dict[str, list[str]] = {}
    for wid in await _family(env.client, h.id):
        on = env.client if wid == h.id else machinery_client(env.client)
        history = await on.get_workflow_handle(wid).fetch_history()
        for event in history.events:
            text = MessageToJson(event)
            if '"failure"' in text:
                failures.setdefault(wid, []).append(text)
    stage = f"{h.id}/eu-west-1/test"
    # the failing stage's result, its failed deploy activity, and the rollout's result were all looked at
    assert any("DeployError" in t for t in failures[stage]) and any("RolledBack" in t for t in failures[stage])
    assert any("RolledBack" in t for t in failures[h.id])
    for wid, texts in failures.items():
        for text in texts:
            assert not [f for f in FRAMES if f in text], (wid, text[:1500])
