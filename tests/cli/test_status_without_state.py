"""Status commands never trace back (issue #29 b): a run that failed on invalid start input, or whose state cannot be
read, is one line naming why and an exit code from bifrost_cli/exits.py, until a new run starts.

Runs are started as the UI or a script would (any type, any id, any input) through a plain client; the commands run
in-process with click's runner."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from click.testing import CliRunner, Result
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from bifrost_cli.exits import EXIT_ABORTED, EXIT_INVALID
from bifrost_cli.main import cli
from tests.workflows.helpers import fleet, running_worker
from workflows.evacuation.settings import evacuation_id
from workflows.guard.models import guard_id
from workflows.revert.models import revert_id


async def invoke(client: Client, *args: str) -> Result:
    """`bifrost ARGS` in-process (in a thread: the command runs its own event loop); exceptions are caught, so a
    traceback shows up as `res.exception`, as it would as a process that dies with one."""
    env = {"TEMPORAL_ADDRESS": client.service_client.config.target_host, "TEMPORAL_NAMESPACE": client.namespace}
    return await asyncio.to_thread(CliRunner().invoke, cli, list(args), env=env)


async def ended(handle: WorkflowHandle[Any, Any], timeout: float = 60) -> WorkflowExecutionStatus:
    """Poll until the run has ended (with a deadline), and say how."""
    async with asyncio.timeout(timeout):
        while True:
            status = (await handle.describe()).status
            if status is not None and status != WorkflowExecutionStatus.RUNNING:
                return status
            await asyncio.sleep(0.1)


def one_line_without_traceback(res: Result) -> str:
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    lines = res.output.splitlines()
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    return lines[0]


# (workflow type, its id, the status command) for every status command
def _commands(service: str) -> list[tuple[str, str, list[str]]]:
    return [
        ("EvacuationWorkflow", evacuation_id(service), ["traffic", "status", service]),
        ("RegionGuardWorkflow", guard_id(service), ["guard", "status", service]),
        ("RolloutWorkflow", f"rollout/{service}/2.0.0", ["status", f"rollout/{service}/2.0.0"]),
        ("RevertWorkflow", revert_id(service, "1.0.0"), ["status", revert_id(service, "1.0.0")]),
    ]


@pytest.mark.parametrize("as_json", [False, True])
async def test_every_status_command_after_a_start_with_invalid_input_is_one_line_and_exit_2(
        env, task_queue, tmp_path, as_json: bool):
    service = f"bad-{uuid.uuid4().hex[:8]}"
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        for kind, wid, command in _commands(service):
            # as from the UI's Start Workflow: a misspelt field and a key carrying an escape sequence
            h = await env.client.start_workflow(kind, {"service": service, "bogus": 1, "\x1b[2Jx": 2}, id=wid,
                                                task_queue=task_queue)
            assert await ended(h) == WorkflowExecutionStatus.FAILED
            res = await invoke(env.client, *command, *(["--json"] if as_json else []))
            line = one_line_without_traceback(res)
            assert res.exit_code == EXIT_INVALID, (command, res.exit_code, res.output)
            assert line.startswith(f"{wid}: the last run failed on invalid input") and "bogus" in line, line
            assert "\x1b" not in res.output, line


async def test_a_run_of_another_type_under_the_id_terminated_at_once_is_one_line_and_exit_3(env, task_queue, tmp_path):
    """A run whose state cannot be read at all (a type no worker knows, terminated before its first task)."""
    service = f"odd-{uuid.uuid4().hex[:8]}"
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        for _, wid, command in _commands(service):
            h = await env.client.start_workflow("NotABifrostWorkflow", id=wid, task_queue=task_queue)
            await h.terminate(reason="started by mistake")
            assert await ended(h) == WorkflowExecutionStatus.TERMINATED
            res = await invoke(env.client, *command)
            line = one_line_without_traceback(res)
            assert res.exit_code == EXIT_ABORTED, (command, res.exit_code, res.output)
            assert line.startswith(f"{wid}: the last run ended terminated (NotABifrostWorkflow)"), line
