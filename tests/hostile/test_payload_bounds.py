"""Bounded payloads (issue #29): an update, signal or start input over MAX_SENT_PAYLOAD_BYTES cannot fail a workflow task.

Found: an update of 3 MB made the SDK's answer to it (which carries the request back) larger than the server's blob
limit; the workflow task failed for about 20 s and every pause, approval and abort sent meanwhile was refused.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import ContinueAsNewInitiator, EventType, WorkflowTaskFailedCause
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from common.namespaces import machinery_namespace
from common.types import MAX_SENT_PAYLOAD_BYTES
from tests.workflows.helpers import fleet, make_request, running_worker, start
from worker import bounds
from worker.build import WORKFLOWS
from workflows.rollout.models import RolloutState
from workflows.rollout.workflow import RolloutWorkflow

MACHINERY_ONLY = {"StageWorkflow", "ServiceLockWorkflow"}  # run only in the machinery namespace

BIG = 3_000_000  # over the dev server's blob limit (2 MiB), as in the attack
MEDIUM = 300_000  # over the bound, under the server's limit: only Bifrost refuses it
# the size of a MEDIUM payload as sent (JSON and metadata), and the bound, in the one line Bifrost writes about it
SIZE_LINE = re.compile(rf"the input is 300,0\d\d bytes, over the {MAX_SENT_PAYLOAD_BYTES:,}-byte bound on anything sent to "
                       "Bifrost")
GATED = {"gates": [{"wave": 4}, {"wave": 6}], "approvers": ["alice", "bob"]}
# what a gated rollout's workers must have measured (every kind of payload it sends)
MEASURED = ("initialize_workflow RolloutWorkflow", "initialize_workflow StageWorkflow", "initialize_workflow ReportWorkflow",
            "initialize_workflow ServiceLockWorkflow", "signal_workflow stage_progress", "signal_workflow acquire",
            "do_update approve")


async def wait_for(handle: WorkflowHandle, pred: Any, timeout: float = 30.0) -> RolloutState:
    async with asyncio.timeout(timeout):
        while not pred(state := await handle.query(RolloutWorkflow.status)):
            await asyncio.sleep(0.1)
        return state


async def events(handle: WorkflowHandle, kind: int) -> list[Any]:
    return [e async for e in handle.fetch_history_events() if e.event_type == kind]


async def failed_tasks(handle: WorkflowHandle, before: int | None = None) -> list[str]:
    """The cause and message of every WORKFLOW_TASK_FAILED event in the run's history (before event id `before`)."""
    found = await events(handle, EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED)
    return [f"{WorkflowTaskFailedCause.Name(a.cause)}: {a.failure.message}" for e in found
            if before is None or e.event_id < before for a in [e.workflow_task_failed_event_attributes]]


async def accepted_updates(handle: WorkflowHandle) -> list[str]:
    found = await events(handle, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED)
    return [e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name for e in found]


def oversized(kind: str, size: int) -> dict[str, Any]:
    """A payload of `kind` whose free text is `size` characters long."""
    junk = "x" * size
    return {
        "abort": {"by": "mallory", "reason": junk},
        "approve": {"wave": 4, "approver": "alice", "comment": junk},
        "resolve_hold": {"stage": "us-east-1/prod", "action": "promote", "by": "alice", "reason": junk},
        "pause": {"by": "mallory", "reason": junk},
    }[kind]


async def flood(handle: WorkflowHandle, stop: asyncio.Event, outcomes: list[str]) -> None:
    """Send oversized updates of four kinds, four at a time, until `stop`; record how each ended."""
    kinds = ("abort", "approve", "resolve_hold", "pause")

    async def one(kind: str, size: int) -> None:
        try:
            await handle.execute_update(kind, oversized(kind, size))
            outcomes.append(f"{kind}: ACCEPTED")
        except Exception as err:  # noqa: BLE001 - every way of being refused is recorded, acceptance is the failure
            outcomes.append(f"{kind}: {type(err).__name__}")

    while not stop.is_set():
        await asyncio.gather(*(one(k, BIG + 100_000 * i) for i, k in enumerate(kinds)))


async def test_a_flood_of_oversized_updates_keeps_no_legitimate_update_out(env, task_queue, tmp_path):
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        h = await start(env.client, make_request(approvals=GATED), task_queue)
        await wait_for(h, lambda s: s.status == "awaiting_approval")
        stop, outcomes = asyncio.Event(), []
        flooding = asyncio.create_task(flood(h, stop, outcomes))
        try:
            async with asyncio.timeout(60):
                while len(outcomes) < 4:  # the flood is under way before the first legitimate update
                    await asyncio.sleep(0.05)
            legit = [("pause", {"by": "alice", "reason": "incident"}), ("resume", {"by": "alice"}),
                     ("approve", {"wave": 4, "approver": "bob", "comment": "ok"}),
                     ("abort", {"by": "alice", "reason": "incident"})]
            answers = []
            for name, arg in legit:
                async with asyncio.timeout(15):  # the attack held each of them off for about 20 s
                    answers.append(await h.execute_update(name, arg))
        finally:
            stop.set()
            await flooding
        assert all(a["ok"] for a in answers), answers
        await wait_for(h, lambda s: s.status in ("rolled_back", "aborted"), timeout=60)
    assert len(outcomes) >= 8 and not [o for o in outcomes if o.endswith("ACCEPTED")], outcomes
    assert await accepted_updates(h) == ["pause", "resume", "approve", "abort"]
    aborted = (await events(h, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED))[-1].event_id
    assert await failed_tasks(h, before=aborted) == []  # each legitimate update landed in the first task that saw it
    # after the abort, the flood's last updates may arrive as the rollout ends: the server then retries the ending
    # task at once (UnhandledCommand, as for any update or signal at that moment); nothing else failed
    assert all(f.startswith("WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND") for f in await failed_tasks(h))


async def test_an_update_over_the_bound_but_under_the_servers_limit_is_refused_without_history(env, task_queue, tmp_path):
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        h = await start(env.client, make_request(approvals=GATED), task_queue)
        await wait_for(h, lambda s: s.status == "awaiting_approval")
        # an approval whose extra field carries the bulk: the approve model alone would not refuse it by its text
        with pytest.raises(Exception) as err:  # noqa: PT011 - the server's rejection, whatever its class
            await h.execute_update("approve", {"wave": 4, "approver": "alice", "comment": "x" * 1000,
                                               **{f"k{i}": "y" * 1000 for i in range(MEDIUM // 1000)}})
        assert "ACCEPTED" not in str(err.value)
        ack = await h.execute_update("approve", {"wave": 4, "approver": "alice", "comment": "fine"})
        assert ack["ok"]
    assert await failed_tasks(h) == []
    assert await accepted_updates(h) == ["approve"]


@pytest.mark.parametrize("workflow", [w.__name__ for w in WORKFLOWS])
async def test_a_start_input_over_the_bound_is_refused_at_once_naming_the_size(env, task_queue, tmp_path, workflow):
    where = machinery_namespace(env.client.namespace) if workflow in MACHINERY_ONLY else env.client.namespace
    raw = await Client.connect(env.client.service_client.config.target_host, namespace=where)  # as the UI
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        # over the server's blob limit: the server refuses the start itself, and no run exists
        with pytest.raises(RPCError, match="size exceeds limit"):
            await raw.start_workflow(workflow, {"junk": "x" * BIG}, id=f"big/{uuid.uuid4().hex}", task_queue=task_queue)
        # over the bound, under the server's limit: the run fails on its first task, one line naming the size
        h = await raw.start_workflow(workflow, {"junk": "x" * MEDIUM}, id=f"medium/{uuid.uuid4().hex}",
                                     task_queue=task_queue)
        with pytest.raises(WorkflowFailureError) as err:
            async with asyncio.timeout(30):
                await h.result()
    cause = err.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidPayload", cause
    assert SIZE_LINE.fullmatch(cause.message), cause.message
    assert cause.failure is not None and cause.failure.stack_trace == ""
    assert await failed_tasks(h) == []


async def test_an_oversized_signal_is_ignored_with_one_line_and_no_task_failure(env, task_queue, tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        h = await start(env.client, make_request(approvals=GATED), task_queue)
        await wait_for(h, lambda s: s.status == "awaiting_approval")
        for name in ("stage_progress", "lock_granted", "no_such_signal"):
            await h.signal(name, {"junk": "x" * MEDIUM})  # over the bound: written to history, never handled
            with pytest.raises(RPCError, match="size exceeds limit"):  # over the server's limit: refused when sent
                await h.signal(name, {"junk": "x" * BIG})
        ack = await h.execute_update("pause", {"by": "alice", "reason": "after the signals"})
        assert ack["ok"]
        state = await h.query(RolloutWorkflow.status)
    assert await failed_tasks(h) == []
    assert not [a for a in state.audit if a.action.startswith("ignored")], state.audit  # never reached the workflow
    lines = [r.getMessage() for r in caplog.records if "ignored signal" in r.getMessage()]
    assert [line.split(": ", 2)[1] for line in lines] == [
        f"ignored signal {name!r}" for name in ("stage_progress", "lock_granted", "no_such_signal")]
    assert all(SIZE_LINE.fullmatch(line.split(": ", 2)[2]) for line in lines), lines
    assert not [r for r in caplog.records if "Failed deserializing signal" in r.getMessage()]


async def test_bifrosts_own_signals_updates_and_starts_are_far_below_the_bound(env, task_queue, tmp_path, monkeypatch):
    """The margin: every payload a gated rollout, its stages, reports and lock send each other is under an eighth of
    the bound (measured over the workflow tests: at most 4.1 KB, a guard's continue-as-new; 3.3 KB a report's input)."""
    seen: dict[str, int] = {}
    original = bounds.bound_activation

    def measuring(act: Any) -> list[str]:
        for job in act.jobs:
            for field, name, payloads in (("do_update", "name", "input"), ("signal_workflow", "signal_name", "input"),
                                          ("initialize_workflow", "workflow_type", "arguments")):
                if job.HasField(field):
                    inner = getattr(job, field)
                    key = f"{field} {getattr(inner, name)}"
                    seen[key] = max(seen.get(key, 0), bounds.payload_bytes(getattr(inner, payloads)))
        return original(act)

    monkeypatch.setattr(bounds, "bound_activation", measuring)
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        h = await start(env.client, make_request(approvals=GATED), task_queue)
        await wait_for(h, lambda s: s.status == "awaiting_approval")
        await h.execute_update("approve", {"wave": 4, "approver": "alice", "comment": "ok"})
        await wait_for(h, lambda s: s.status == "awaiting_approval" and s.awaiting_wave == 6)
        await h.execute_update("approve", {"wave": 6, "approver": "bob", "comment": "ok"})
        await wait_for(h, lambda s: s.status == "succeeded", timeout=60)
        # a stage waits only for its ReportWorkflow's start, not its first task: wait for what is measured itself
        deadline = asyncio.get_running_loop().time() + 30
        while not all(key in seen for key in MEASURED) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
    for expected in MEASURED:
        assert expected in seen, sorted(seen)
    assert max(seen.values()) < MAX_SENT_PAYLOAD_BYTES // 8, seen


def init_job(size: int, **fields: Any) -> WorkflowActivation:
    act = WorkflowActivation()
    job = act.jobs.add().initialize_workflow
    job.workflow_type = "LockWorkflow"
    job.arguments.append(Payload(metadata={"encoding": b"json/plain"}, data=b"x" * size))
    for k, v in fields.items():
        if k == "parent":
            job.parent_workflow_info.workflow_id = v
        else:
            setattr(job, k, v)
    return act


@pytest.mark.parametrize(("fields", "refused"), [
    ({}, True),  # a start by hand
    ({"continued_from_execution_run_id": "r1", "continued_initiator": 2}, True),  # a retry repeats a sent input
    ({"continued_from_execution_run_id": "r1", "continued_initiator": 3}, True),  # so does a cron run
    ({"continued_from_execution_run_id": "r1", "continued_initiator": 1}, False),  # the workflow's own continue-as-new
    ({"parent": "rollout/x"}, False),  # a child's input, built by its parent
])
def test_only_a_start_input_someone_could_have_sent_is_bounded(fields: dict[str, Any], refused: bool):
    assert ContinueAsNewInitiator.CONTINUE_AS_NEW_INITIATOR_WORKFLOW == 1
    act = init_job(MEDIUM, **fields)
    lines = bounds.bound_activation(act)
    encoding = act.jobs[0].initialize_workflow.arguments[0].metadata["encoding"]
    assert (encoding == bounds.OVERSIZED_ENCODING) is refused and bool(lines) is refused
    small = init_job(MAX_SENT_PAYLOAD_BYTES - 100)
    assert bounds.bound_activation(small) == [] and len(small.jobs[0].initialize_workflow.arguments[0].data) > 60_000
