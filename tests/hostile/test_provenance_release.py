"""Provenance of what a revert acts on (issue #29): the release it undoes and the versions `--to` may name come only
from rollout runs Bifrost ran (each verified from its own history), and a revert runs only under its own id.

The attack found: a `RolloutWorkflow` started by hand as `rollout/<svc>/<never-built>` on a task queue nobody polls,
with the search attributes `BifrostStatus=succeeded`, `BifrostVersion=<never-built>`, then terminated; `bifrost revert
<svc> --to <never-built>` exited 0 and put production on a version that never ran anywhere, with no canary.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.worker import Worker

from bifrost_cli import revert as revert_cli
from bifrost_cli.exits import EXIT_INVALID, EXIT_OK
from common.failures import INVALID_PAYLOAD
from common.types import StageRef
from tests.workflows.helpers import failed_at_once, fleet, make_request, running_worker
from tests.workflows.revert_helpers import FAST, listed_closed, revert_input, revert_outcome, start_revert
from tests.workflows.test_revert import _released, _running_at_a_gate
from workflows import search
from workflows.revert.workflow import RevertWorkflow

STAGES = ["us-east-1/test", "us-east-1/prod", "eu-west-1/test", "eu-west-1/prod", "ap-south-1/test", "ap-south-1/prod"]


def _claims(service: str, version: str) -> TypedSearchAttributes:
    """What a forger sets at start: the search attributes of a rollout of `version` that succeeded."""
    return TypedSearchAttributes([SearchAttributePair(search.SERVICE, service),
                                  SearchAttributePair(search.VERSION, version),
                                  SearchAttributePair(search.STATUS, "succeeded")])


async def _forged_and_terminated(client: Client, service: str, version: str) -> str:
    """The reported attack: a rollout of `version` started on a task queue nobody polls, claiming success, terminated."""
    req = make_request(service=service, version=version)
    h = await client.start_workflow("RolloutWorkflow", req.model_dump(mode="json"), id=req.workflow_id,
                                    task_queue=f"nobody-polls-{uuid.uuid4().hex[:8]}", search_attributes=_claims(service, version))
    await h.terminate(reason="forged")
    await listed_closed(client, h.id)
    return h.id


async def _forged_bad_input_on_our_queue(client: Client, service: str, version: str, task_queue: str) -> str:
    """A rollout started by hand on the revert's own task queue with an input the rollout refuses (its worker fails it
    at once, before it writes any search attribute of its own), still claiming success."""
    h = await client.start_workflow("RolloutWorkflow", {"service": service, "version": version, "requested_by": "x"},
                                    id=f"rollout/{service}/{version}", task_queue=task_queue,
                                    search_attributes=_claims(service, version))
    with pytest.raises(WorkflowFailureError):
        await h.result()
    await listed_closed(client, h.id)
    return h.id


@workflow.defn(name="RolloutWorkflow", sandboxed=False)
class ImpostorRollout:
    """Someone's own worker on their own task queue, registering the rollout's name: it completes with whatever result
    it likes (a final state claiming every stage went to its version)."""

    @workflow.run
    async def run(self, request: dict[str, Any]) -> dict[str, Any]:
        stages = [{"region": k.split("/")[0], "environment": k.split("/")[1], "wave": 1, "status": "succeeded",
                   "version_before": "1.0.0", "version_now": request["version"]} for k in STAGES]
        return {"rollout_id": workflow.info().workflow_id, "service": request["service"], "version": request["version"],
                "status": "succeeded", "phase": "succeeded", "stages": stages}


async def _completed_by_an_impostor(client: Client, service: str, version: str) -> str:
    """A rollout Completed, with a full final state, by a worker that is not Bifrost's (another task queue)."""
    queue = f"impostor-{uuid.uuid4().hex[:8]}"
    req = make_request(service=service, version=version)
    async with Worker(client, task_queue=queue, workflows=[ImpostorRollout]):
        h = await client.start_workflow("RolloutWorkflow", req.model_dump(mode="json"), id=req.workflow_id,
                                        task_queue=queue, search_attributes=_claims(service, version))
        await h.result()
    await listed_closed(client, h.id)
    return h.id


def _cli_env(monkeypatch: pytest.MonkeyPatch, client: Client) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", client.service_client.config.target_host)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", client.namespace)


def _on(f: Any, service: str, version: str) -> list[str]:
    """The stages whose primary runs `version`."""
    return [k for k in STAGES if f.slot(StageRef(service=service, region=k.split("/")[0],
                                                 environment=k.split("/")[1])).primary == version]


async def test_versions_claimed_by_runs_bifrost_did_not_run_are_refused_and_nothing_moves(env, task_queue, monkeypatch, capsys):
    """The reported attack and its kin, through `bifrost revert`: a terminated never-polled run, a run the rollout's own
    validation refused on our queue, and a run Completed by someone else's worker, each claiming to have succeeded
    with its version before the release: none is a version to go back to (exit 2, nothing deployed)."""
    _cli_env(monkeypatch, env.client)
    client, f = env.client, fleet()
    service = f"payments-{uuid.uuid4().hex[:8]}"
    async with running_worker(client, f, task_queue):
        forged = {"6.6.6": await _forged_and_terminated(client, service, "6.6.6"),
                  "7.7.7": await _forged_bad_input_on_our_queue(client, service, "7.7.7", task_queue),
                  "8.8.8": await _completed_by_an_impostor(client, service, "8.8.8")}
        req, release = await _released(client, f, task_queue, service=service)  # 2.0.0 over the fleet's 1.0.0
        before = len(f.calls)
        for version in forged:
            inp = revert_cli.revert_input({"service": service, "to_version": version, "requested_by": "mallory",
                                           "reason": "INC-1", **FAST})
            code = await revert_cli.run_revert(inp, wait=True, task_queue=task_queue)
            err = capsys.readouterr().err
            assert code == EXIT_INVALID, (version, code, err)
            assert f"to_version: {version} is not a version {service} ran before {release}" in err, err
            assert "versions to go back to: 1.0.0" in err and "nothing was deployed" in err, err
        assert [c for c in f.calls[before:] if c[0] in ("rollback", "deploy", "promote")] == []
        assert _on(f, service, "2.0.0") == STAGES
        # the release itself is still undone
        good = revert_cli.revert_input({"service": service, "to_version": "1.0.0", "requested_by": "alice",
                                        "reason": "INC-2", **FAST})
        assert await revert_cli.run_revert(good, wait=True, task_queue=task_queue) == EXIT_OK
        assert f"undoes {release} (2.0.0)" in capsys.readouterr().out
    assert _on(f, service, "1.0.0") == STAGES


async def test_a_forged_run_after_the_release_is_neither_the_release_nor_nameable(env, task_queue):
    """A terminated never-polled run newer than the release: the revert passes over it and undoes the release; named
    with --release it is refused, saying why."""
    client, f = env.client, fleet()
    async with running_worker(client, f, task_queue):
        req, release = await _released(client, f, task_queue)
        forged = await _forged_and_terminated(client, req.service, "6.6.6")
        before = len(f.calls)
        named, failure = await revert_outcome(await start_revert(
            client, revert_input(req.service, release=forged), task_queue))
        assert named.status == "invalid", (named.status, named.reason)
        assert f"release: {forged} was started on task queue 'nobody-polls-" in failure, failure
        assert "no Bifrost worker of this deployment ran it" in failure and "nothing was deployed" in failure
        assert [c for c in f.calls[before:] if c[0] == "rollback"] == []
        state, failure = await revert_outcome(await start_revert(client, revert_input(req.service), task_queue))
    assert failure == "" and state.status == "reverted", (state.status, state.reason)
    assert state.release == release and state.release_version == "2.0.0"
    assert "6.6.6" not in state.known_versions


async def test_a_rollout_bifrost_ran_that_was_terminated_is_no_release(env, task_queue):
    """A real rollout, run by the worker, terminated half-way (at an approval gate): it left no final state, so what
    it changed is unknown; it is not a release to undo, named or not."""
    client, f = env.client, fleet()
    async with running_worker(client, f, task_queue):
        req, release = await _released(client, f, task_queue)
        gated = await _running_at_a_gate(client, req.service, task_queue)
        await gated.terminate(reason="by hand")
        await listed_closed(client, gated.id)
        before = len(f.calls)
        named, failure = await revert_outcome(await start_revert(
            client, revert_input(req.service, to_version="2.0.0", release=gated.id), task_queue))
    assert named.status == "invalid", (named.status, named.reason)
    assert f"release: {gated.id} was terminated: Bifrost wrote no final state for it" in failure, failure
    assert [c for c in f.calls[before:] if c[0] == "rollback"] == []


async def test_a_revert_started_under_another_id_fails_at_once_naming_the_id(env, task_queue):
    """The revert refuses to run under any id but `revert/<service>/<version>` of its own input, whatever started it."""
    client, f = env.client, fleet()
    async with running_worker(client, f, task_queue):
        inp = revert_input(f"payments-{uuid.uuid4().hex[:8]}")
        h = await client.start_workflow(RevertWorkflow.run, inp, id=f"revert/other/{uuid.uuid4().hex[:6]}",
                                        task_queue=task_queue)
        cause = await failed_at_once(h, INVALID_PAYLOAD)  # one line, no Python frames
        history = await h.fetch_history()
    assert cause.message == (f"workflow id: a revert of {inp.service} to 1.0.0 must run as '{inp.workflow_id}', "
                             f"not '{h.id}'; nothing was done")
    kinds = {e.event_type for e in history.events}
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED not in kinds  # nothing was looked at, nothing locked
    assert [c for c in f.calls if c[0] == "rollback"] == []


async def test_a_run_on_our_queue_that_no_worker_ran_is_no_release(env, task_queue):
    """Started by hand on the revert's own task queue while no worker polled it, and terminated before one did: the
    task queue is right, but no workflow task was ever completed, so Bifrost never ran it."""
    client, f = env.client, fleet()
    req = make_request(version="6.6.6")
    forged = await client.start_workflow("RolloutWorkflow", req.model_dump(mode="json"), id=req.workflow_id,
                                         task_queue=task_queue, search_attributes=_claims(req.service, "6.6.6"))
    await forged.terminate(reason="forged")
    await listed_closed(client, forged.id)
    async with running_worker(client, f, task_queue):
        await _released(client, f, task_queue, service=req.service)
        before = len(f.calls)
        named, failure = await revert_outcome(await start_revert(
            client, revert_input(req.service, release=forged.id), task_queue))
    assert named.status == "invalid", (named.status, named.reason)
    assert f"release: {forged.id} was never run by a worker" in failure, failure
    assert [c for c in f.calls[before:] if c[0] == "rollback"] == []
