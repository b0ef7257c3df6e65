"""`bifrost revert`: help, refusals before Temporal is asked, exit codes, and a revert against a dev server."""

from __future__ import annotations

import asyncio

import pytest
from click.testing import CliRunner
from temporalio.client import WorkflowExecutionStatus

from bifrost_cli import listed, ops
from bifrost_cli import revert as revert_cli
from bifrost_cli.main import cli
from bifrost_cli.ops import outcome, start_rollout
from tests.cli.test_cli import _closed_port
from tests.workflows.helpers import fleet, make_request, running_worker
from tests.workflows.revert_helpers import FAST, listed_closed
from tests.workflows.test_revert import _released, _running_at_a_gate
from workflows.revert.models import RevertState
from workflows.revert.workflow import RevertWorkflow
from workflows.rollout.updates import Abort


def run(*args: str, env: dict | None = None):
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def test_the_cli_names_the_workflow_and_its_query():
    assert revert_cli.REVERT_WORKFLOW == listed.REVERT_WORKFLOW == RevertWorkflow.__temporal_workflow_definition.name  # type: ignore[attr-defined]
    assert listed.REVERT_WORKFLOW in listed.LISTED  # `bifrost list` shows reverts
    assert revert_cli.STATUS_QUERY in RevertWorkflow.__temporal_workflow_definition.queries  # type: ignore[attr-defined]


def test_help_teaches_with_examples_and_exit_codes():
    out = run("revert", "--help").output
    assert 'bifrost revert payments --to 1.9.0 --reason "INC-42: 2.0.0 corrupts receipts" --wait' in out
    assert "--queue" in out and "--evacuate" in out and "3  refused because a rollout of the service runs" in out
    assert "revert" in run("--help").output


@pytest.mark.parametrize("args, words", [
    (["--to", "1.9.0; rm -rf /"], "--to: String should match pattern"),
    (["--to", "1.9.0", "--stage", "eu-west-1"], "--stage: 'eu-west-1' is not a stage"),
    (["--to", "1.9.0", "--health-minutes", "0"], "--health-minutes: Input should be greater than or equal to"),
    (["--to", "1.9.0", "--as", "alice\x1b[31m"], "--as:"),
])
def test_bad_input_exits_2_before_contacting_temporal(args, words):
    res = run("revert", "payments", "--reason", "INC-1", *args,
              env={"TEMPORAL_ADDRESS": f"127.0.0.1:{_closed_port()}"})  # nothing listens: it must not get that far
    assert res.exit_code == 2, res.output
    assert "revert refused, nothing was deployed" in res.output and words in res.output
    assert "\x1b" not in res.output  # what was typed is escaped for the terminal


def test_unreachable_temporal_exits_4():
    res = run("revert", "payments", "--to", "1.9.0", "--reason", "x", env={"TEMPORAL_ADDRESS": f"127.0.0.1:{_closed_port()}"})
    assert res.exit_code == 4 and "could not reach Temporal" in res.output


def test_exit_codes_follow_the_outcome():
    assert [revert_cli.exit_code_for(s) for s in ("reverted", "failed", "invalid", "rejected", "aborted")] == [0, 1, 2, 3, 3]


async def test_revert_status_and_refusal_against_a_dev_server(env, task_queue, monkeypatch, capsys):
    monkeypatch.setenv("TEMPORAL_ADDRESS", env.client.service_client.config.target_host)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", env.client.namespace)
    client, f = env.client, fleet()
    req = make_request(regions=[{"name": "us-east-1", "traffic_share": 1.0}], blast_radius={"canary_region": None})
    async with running_worker(client, f, task_queue):
        h = await start_rollout(client, req, task_queue)
        await outcome(h)
        await listed_closed(client, h.id)
        bad = revert_cli.revert_input({"service": req.service, "to_version": "0.1.0", "requested_by": "alice",
                                       "reason": "INC-9", **FAST})
        assert await revert_cli.run_revert(bad, wait=False, task_queue=task_queue) == 2
        assert "to_version: 0.1.0 is not a version" in capsys.readouterr().err

        good = bad.model_copy(update={"to_version": "1.0.0"})
        assert await revert_cli.run_revert(good, wait=True, task_queue=task_queue) == 0
        out = capsys.readouterr().out
        assert f"undoes {h.id} (2.0.0); the last wave first:" in out
        assert "us-east-1/prod" in out and "reverted" in out and "alice: revert" in out

        await revert_cli.show_revert(good.workflow_id, as_json=False)
        out = capsys.readouterr().out
        assert f"{good.workflow_id}: {req.service} back to 1.0.0 — reverted" in out and "INC-9" in out
        await listed_closed(client, good.workflow_id)
        await ops.list_rollouts(service=req.service, status=None, limit=10, console=ops.Console(width=300))
        listed = capsys.readouterr().out
        assert good.workflow_id in listed and h.id in listed
        # the reverted release says so, naming the revert and when, read from the revert's own history
        row = next(line for line in listed.splitlines() if h.id in line)
        assert f"succeeded, REVERTED by {good.workflow_id} at " in row, listed
        await ops.list_rollouts(service=req.service, status=None, limit=10, console=ops.Console(width=80))
        narrow = capsys.readouterr().out  # a narrow terminal: ids folded onto the next line, never cut with an ellipsis
        assert "…" not in narrow, narrow
        assert await ops.show_status(h.id, as_json=False, console=ops.Console(width=300)) == 0
        status = capsys.readouterr().out
        assert f"REVERTED by {good.workflow_id} at " in status and "back on 1.0.0, asked by alice (INC-9)" in status, status


async def test_an_aborted_revert_exits_3_and_status_reads_its_memo_without_a_worker(env, task_queue, monkeypatch, capsys):
    """An aborted revert ends Canceled (its state in its memo): `revert --wait` exits 3 as documented, and `status`
    reads the state from the run's history once no worker runs."""
    monkeypatch.setenv("TEMPORAL_ADDRESS", env.client.service_client.config.target_host)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", env.client.namespace)
    client, f = env.client, fleet()
    async with running_worker(client, f, task_queue):
        req, _ = await _released(client, f, task_queue)
        await _running_at_a_gate(client, req.service, task_queue)  # holds the lock: the revert queues behind it
        inp = revert_cli.revert_input({"service": req.service, "to_version": "1.0.0", "requested_by": "alice",
                                       "reason": "INC-9", "on_conflict": "queue", **FAST})
        waiting = asyncio.ensure_future(revert_cli.run_revert(inp, wait=True, task_queue=task_queue))
        h = client.get_workflow_handle(inp.workflow_id)
        async with asyncio.timeout(60):
            while (queued := await revert_cli._state(h)) is None or queued.status != "queued":
                await asyncio.sleep(0.2)
        await h.execute_update(RevertWorkflow.abort, Abort(by="carol", reason="not now"))
        code = await waiting
    err = capsys.readouterr().err
    assert code == 3, err
    assert "aborted: aborted by carol: not now" in err, err
    assert (await h.describe()).status == WorkflowExecutionStatus.CANCELED
    # the worker has stopped: no query could be answered; the run's own memo upsert needs none
    await revert_cli.show_revert(inp.workflow_id, as_json=True)
    state = RevertState.model_validate_json(capsys.readouterr().out)
    assert (state.status, state.reason) == ("aborted", "aborted by carol: not now")


def test_the_revert_pages_header_shows_the_version_as_typed():
    """A Markdown escape inside a code span is shown literally: the header read `1\\.9.0` before the version was
    put in a code span of its own."""
    from tests.workflows.revert_helpers import revert_input

    header = revert_cli.revert_header(revert_input("pay-264854", to_version="1.9.0", requested_by="al_ice"))
    assert "`1.9.0`" in header and "\\." not in header.split("asked by")[0]
    assert "al\\_ice" in header  # free text outside a code span stays escaped
