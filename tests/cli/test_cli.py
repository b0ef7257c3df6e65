"""The `bifrost` CLI: offline commands, exit codes, and a submit against a real dev server."""

from __future__ import annotations

import socket

import pytest
import yaml
from click.testing import CliRunner

from bifrost_cli.main import cli


def run(*args: str, env: dict | None = None):
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def test_help_teaches_the_flow_and_exit_codes():
    out = run("--help").output
    assert "bifrost submit" in out and "bifrost approve" in out and "TEMPORAL_ADDRESS" in out
    sub = run("submit", "--help").output
    assert "3  it was aborted or rejected" in sub and "4  Temporal could not be reached" in sub


def test_plan_prints_waves_without_a_server():
    res = run("plan", "deploy/examples/request.yaml")
    assert res.exit_code == 0
    assert "ap-south-1/prod (canary region)" in res.output
    assert "wave touches 50% of production" in res.output
    assert "approval" in res.output


def test_invalid_request_exits_2_and_names_the_field(tmp_path):
    data = yaml.safe_load(open("deploy/examples/request.yaml"))
    data["rollback_scope"] = "everything"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    for cmd in ("plan", "submit"):
        res = run(cmd, str(bad))
        assert res.exit_code == 2, res.output
        assert "rollback_scope" in res.output and "Nothing was deployed" in res.output


def test_plan_conflict_exits_2(tmp_path):
    data = yaml.safe_load(open("deploy/examples/request.yaml"))
    data["blast_radius"]["prod_traffic_caps"] = [0.05]
    bad = tmp_path / "caps.yaml"
    bad.write_text(yaml.safe_dump(data))
    res = run("plan", str(bad))
    assert res.exit_code == 2
    assert "blast_radius.prod_traffic_caps" in res.output


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_temporal_exits_4():
    res = run("submit", "deploy/examples/demo-good.yaml", env={"TEMPORAL_ADDRESS": f"127.0.0.1:{_closed_port()}"})
    assert res.exit_code == 4
    assert "could not reach Temporal" in res.output


async def test_submit_follow_reports_outcome_as_exit_code(env, task_queue, tmp_path, monkeypatch):
    import io

    from rich.console import Console

    from bifrost_cli import ops
    from tests.workflows.helpers import fleet, make_request, running_worker

    monkeypatch.setenv("TEMPORAL_ADDRESS", env.client.service_client.config.target_host)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", env.client.namespace)
    good = make_request(regions=[{"name": "us-east-1", "traffic_share": 1.0}], blast_radius={"canary_region": None})
    bad = make_request(service=good.service, version="2.0.1", regions=[{"name": "us-east-1", "traffic_share": 1.0}],
                       blast_radius={"canary_region": None})
    f = fleet(effects=[{"version": "2.0.1", "error_factor": 10}])
    out = io.StringIO()
    console = Console(file=out, width=120)
    async with running_worker(env.client, f, task_queue, tmp_path):
        assert await ops.submit(good, wait=True, follow=True, task_queue=task_queue, console=console) == 0
        assert await ops.submit(bad, wait=True, follow=False, task_queue=task_queue, console=console) == 1
    text = out.getvalue()
    assert "us-east-1/prod" in text and "succeeded" in text and "rolled_back" in text


def test_status_of_an_unknown_rollout_says_so(env, monkeypatch):
    import threading

    monkeypatch.setenv("TEMPORAL_ADDRESS", env.client.service_client.config.target_host)
    result = {}
    # the CLI runs its own event loop; run it on a thread so it does not nest inside the test's loop
    t = threading.Thread(target=lambda: result.update(res=run("status", "rollout/nope/0.0.0")))
    t.start()
    t.join(60)
    res = result["res"]
    assert res.exit_code == 1
    assert "not found" in res.output and "bifrost list" in res.output


async def test_an_update_to_a_rollout_that_has_ended_says_so_and_how_it_ended(env, task_queue, tmp_path, monkeypatch):
    """Temporal answers NOT_FOUND 'workflow execution already completed': the CLI must not say the rollout does not
    exist (it used to print 'not found' and point at `bifrost list`)."""
    import threading

    from bifrost_cli.ops import outcome
    from tests.workflows.helpers import fleet, make_request, running_worker, start

    monkeypatch.setenv("TEMPORAL_ADDRESS", env.client.service_client.config.target_host)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", env.client.namespace)
    req = make_request(regions=[{"name": "us-east-1", "traffic_share": 1.0}], blast_radius={"canary_region": None})
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        h = await start(env.client, req, task_queue)
        assert (await outcome(h)).status == "succeeded"
    result = {}
    t = threading.Thread(target=lambda: result.update(res=run("approve", h.id, "--wave", "1",
                                                              env={"BIFROST_USER": "alice"})))
    t.start()
    t.join(60)
    res = result["res"]
    assert res.exit_code == 1, res.output
    assert f"{h.id} has already ended" in res.output and "not found" not in res.output
    assert f"`bifrost status {h.id}` shows how it ended" in res.output


def test_a_stage_id_that_is_not_found_points_at_its_rollout(env, monkeypatch):
    """A stage page lives in the machinery namespace; its id copied into `status` or an update is not found in the
    namespace the CLI talks to, and the hint names the rollout that steers it."""
    import threading

    monkeypatch.setenv("TEMPORAL_ADDRESS", env.client.service_client.config.target_host)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", env.client.namespace)
    cases = (("status", "rollout/payments/2.4.0/eu-west-1/prod"),
             ("skip-soak", "payments/2.4.0/eu-west-1/prod", "--stage", "eu-west-1/prod", "--reason", "x"),
             ("status", "rollout/payments/2.4.0/eu-west-1/prod/report/eu-west-1-prod-canary"))
    results: list = []
    t = threading.Thread(target=lambda: results.extend(run(*args, env={"BIFROST_USER": "alice"}) for args in cases))
    t.start()
    t.join(60)
    assert len(results) == len(cases)
    for res in results:
        assert res.exit_code == 1 and "not found" in res.output, res.output
        assert ("If it is stage eu-west-1/prod of rollout/payments/2.4.0 (stages run in the machinery namespace"
                in res.output), res.output
        assert "`bifrost status rollout/payments/2.4.0`, and `--stage eu-west-1/prod`" in res.output


# -- plain text, one-line refusals, local checks (issues #12 and #13) ------------------------------------------
def closed_env() -> dict[str, str]:
    """A Temporal address nobody listens on: a command that tried to connect would exit 4, not 2."""
    return {"TEMPORAL_ADDRESS": f"127.0.0.1:{_closed_port()}", "BIFROST_USER": "alice"}


def test_user_text_is_never_read_as_markup(tmp_path):
    data = yaml.safe_load(open("deploy/examples/request.yaml"))
    data["[/red]"] = "x"
    data["rollback_scope"] = "[/]"
    data["requested_by"] = "[bold]mallory[/bold]"
    bad = tmp_path / "markup.yaml"
    bad.write_text(yaml.safe_dump(data))
    res = run("plan", str(bad))
    assert res.exit_code == 2
    assert "[/red]: unknown field" in res.output and "(got '[/]')" in res.output


def test_a_valid_request_with_markup_in_its_text_plans(tmp_path):
    data = yaml.safe_load(open("deploy/examples/request.yaml"))
    data["requested_by"] = "[/red] [/] [bold]x"
    data["change"]["description"] = "[link=https://x]y[/link] :smile:"
    good = tmp_path / "markup-ok.yaml"
    good.write_text(yaml.safe_dump(data))
    res = run("plan", str(good))
    assert res.exit_code == 0, res.output
    assert "workflow id: rollout/payments/2.4.0" in res.output


def test_render_shows_user_text_as_written():
    import io

    from rich.console import Console

    from bifrost_cli.render import state_table
    from workflows.rollout.models import RolloutState
    from workflows.stage.models import StageState

    stage = StageState.of("us-east-1", "prod", 1).model_copy(update={"reason": "aborted by [/red]: [bold]no[/]"})
    state = RolloutState(rollout_id="rollout/a/1", service="a", version="1", phase="rolling_back", stages=[stage],
                         doing="[/]")  # waiting_for is computed: what it does while no hold holds it
    out = io.StringIO()
    Console(file=out, width=200).print(state_table(state))  # a console with markup on, as the demo's Live uses
    assert "aborted by [/red]: [bold]no[/]" in out.getvalue() and "waiting for [/]" in out.getvalue()


def test_ids_people_copy_are_never_cut_short_in_a_narrow_terminal():
    """`status` and `plan` piped or in a CI log (rich's 80 columns): each stage key stays whole on one line, and
    the long notes fold instead (it used to print 'ap-south-1/t…')."""
    import io

    from rich.console import Console

    from bifrost_cli.render import plan_table, state_table
    from tests.workflows.helpers import make_request
    from workflows.plan import build_plan
    from workflows.rollout.models import RolloutState
    from workflows.stage.models import StageState

    req = make_request(regions=[{"name": "ap-southeast-2", "traffic_share": 0.5},
                                {"name": "eu-central-1", "traffic_share": 0.5}],
                       blast_radius={"canary_region": "ap-southeast-2"})
    plan = build_plan(req)
    stages = [StageState.of(s.region, s.environment, w.index).model_copy(
        update={"reason": "canary judged fail: FAIL score 50.00 — 1 of 2 metrics regressed: latency_p99 High"})
        for w in plan.waves for s in w.stages]
    state = RolloutState(rollout_id="rollout/a/1", service="a", version="1", phase="running", stages=stages)
    for table in (state_table(state), plan_table(req, plan)):
        out = io.StringIO()
        Console(file=out, width=80).print(table)
        lines = out.getvalue().splitlines()
        for s in stages:
            assert any(s.key in line for line in lines), (s.key, out.getvalue())
        assert "…" not in out.getvalue(), out.getvalue()
        assert all(line.rstrip()[-1] in "┓┃┩│┘" for line in lines if line[:1] in "┏┃┡│└"), out.getvalue()  # not cropped


def test_a_pipe_or_a_ci_log_gets_whole_lines_not_80_columns(monkeypatch):
    """Piped output has no width: the CLI prints at PIPE_WIDTH rather than rich's 80, where `bifrost list` cut ids to
    'rollout/payment…'; a terminal (or $COLUMNS) keeps its own width."""
    import io

    from bifrost_cli.render import PIPE_WIDTH, console_width

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("COLUMNS", raising=False)
    assert console_width(io.StringIO()) == PIPE_WIDTH >= 160
    assert console_width(Tty()) is None
    monkeypatch.setenv("COLUMNS", "100")
    assert console_width(io.StringIO()) is None


BOMB = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(9))


def nasty_files(tmp_path) -> dict[str, str]:
    import os

    files = {
        "alias bomb": ("bomb.yaml", BOMB.encode(), "once YAML aliases are expanded"),
        "deep json": ("deep.json", b"[" * 50_000 + b"]" * 50_000, "nested too deeply"),
        "binary": ("bin.yaml", bytes(range(256)) * 4, "not UTF-8 text"),
        "infinite json": ("inf.json", b'{"canary": {"analysis_minutes": 1e999}}', "too large to be a number"),
        "window as integer": ("win.yaml", open("deploy/examples/request.yaml", "rb").read().replace(
            b'start: "09:00"', b"start: 9:00", 1), 'did you mean "09:00"?'),
        "time zone directory": ("tz.yaml", open("deploy/examples/request.yaml", "rb").read().replace(
            b"Asia/Kolkata", b"Europe", 1), "unknown IANA time zone 'Europe'"),
        "markup": ("markup.yaml", b"service: payments\n'[/red]': 1\n", "[/red]: unknown field"),
    }
    out = {}
    for key, (name, content, _) in files.items():
        (tmp_path / name).write_bytes(content)
        out[key] = str(tmp_path / name)
    os.mkfifo(tmp_path / "fifo.yaml")
    out |= {"fifo": str(tmp_path / "fifo.yaml"), "directory": str(tmp_path), "missing": str(tmp_path / "no.yaml"),
            "/dev/zero": "/dev/zero"}
    return out


EXPECTED = {"alias bomb": "once YAML aliases are expanded", "deep json": "nested too deeply", "binary": "not UTF-8 text",
            "infinite json": "too large to be a number", "window as integer": 'did you mean "09:00"?',
            "time zone directory": "unknown IANA time zone 'Europe'", "markup": "[/red]: unknown field",
            "fifo": "a FIFO", "directory": "a directory", "missing": "No such file", "/dev/zero": "a device"}


def test_plan_refuses_the_nastiest_files_in_one_line(tmp_path):
    for key, path in nasty_files(tmp_path).items():
        res = CliRunner().invoke(cli, ["plan", path], catch_exceptions=False)
        assert res.exit_code == 2, (key, res.output)
        assert EXPECTED[key] in res.output, (key, res.output)
        assert "Traceback" not in res.output
        problems = [line for line in res.output.splitlines() if line.startswith("  - ")]
        assert problems and all(len(p) < 500 for p in problems), (key, res.output)


@pytest.mark.process
def test_the_real_command_refuses_them_with_exit_2_and_no_traceback(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    bifrost = str(Path(sys.executable).parent / "bifrost")
    for key, path in nasty_files(tmp_path).items():
        if key not in ("alias bomb", "deep json", "binary", "fifo", "markup", "window as integer"):
            continue
        # A file that would hang the command (a FIFO nobody writes, an alias bomb) raises TimeoutExpired here: the
        # bound is a hang guard, not a speed figure (a cold start under a CI load took 35 s).
        done = subprocess.run([bifrost, "plan", path], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, (key, done.returncode, done.stderr)
        assert EXPECTED[key] in done.stderr and "Traceback" not in done.stderr + done.stdout, (key, done.stderr)


def test_worker_refuses_a_bad_targets_file_in_one_line(tmp_path):
    bad = tmp_path / "targets.yaml"
    bad.write_text(BOMB)
    res = run("worker", "--targets", str(bad), env=closed_env())
    assert res.exit_code == 2
    assert "invalid targets file" in res.output and "once YAML aliases are expanded" in res.output


UPDATE_REFUSALS = [
    (["abort", "payments/2.4.0", "--reason", ""], "abort not sent: --reason: must not be empty"),
    (["abort", "payments/2.4.0", "--reason", "   "], "--reason: must not be empty"),
    (["abort", "payments/2.4.0", "--reason", "x" * 2001], "--reason: 2001 characters; at most 2000"),
    (["abort", "payments/2.4.0", "--reason", "why", "--as", ""], "--as: give your name with --as NAME or set BIFROST_USER"),
    (["abort", "payments/2.4.0", "--reason", "\udcff"], "--reason: is not valid UTF-8 text"),
    (["rollback", "payments/2.4.0", "--reason", ""], "rollback not sent: --reason: must not be empty"),
    (["pause", "payments/2.4.0", "--as", "a\nb"], "pause not sent: --as: must be printable text on one line"),
    (["pause", "payments/2.4.0", "--reason", "r" * 5000], "--reason: 5000 characters"),
    (["resume", "payments/2.4.0", "--as", "x" * 201], "resume not sent: --as: 201 characters; at most 200"),
    (["approve", "payments/2.4.0"], "approve not sent: --stage/--wave: give exactly one of"),
    (["approve", "payments/2.4.0", "--stage", "us-east-1/prod", "--wave", "2"], "--stage/--wave: give exactly one of"),
    (["approve", "payments/2.4.0", "--stage", "us-east-1"], "--stage: 'us-east-1' is not a stage; write region/env"),
    (["approve", "payments/2.4.0", "--wave", "0"], "--wave: 0 is not a wave"),
    (["approve", "payments/2.4.0", "--wave", "2", "--comment", "c" * 2001], "--comment: 2001 characters"),
    (["reject", "payments/2.4.0", "--wave", "2", "--reason", ""], "reject not sent: --reason: must not be empty"),
    (["reject", "payments/2.4.0", "--reason", "no"], "--stage/--wave: give exactly one of"),
    (["skip-soak", "payments/2.4.0", "--stage", "[/red]", "--reason", "x"], "skip_soak not sent: --stage: '[/red]' is not a stage"),
    (["skip-soak", "payments/2.4.0", "--stage", "eu-west-1/prod", "--reason", ""], "--reason: must not be empty"),
    (["override-window", "payments/2.4.0", "--stage", "eu-west-1/staging", "--reason", "x"],
     "override_window not sent: --stage: 'eu-west-1/staging' is not a stage"),
    (["override-window", "payments/2.4.0", "--stage", "eu-west-1/prod", "--reason", ""], "--reason: must not be empty"),
    (["promote", "payments/2.4.0", "--stage", "eu-west-1/prod", "--reason", "  "],
     "resolve_hold not sent: --reason: required to promote a held stage"),
    (["retry", "payments/2.4.0", "--stage", "eu-west-1"], "resolve_hold not sent: --stage: 'eu-west-1' is not a stage"),
    (["resolve-hold", "payments/2.4.0", "--stage", "eu-west-1/prod", "--action", "rollback"],
     "resolve_hold not sent: --reason: required to rollback a held stage"),
    (["rollback", "payments/2.4.0", "--stage", "eu-west-1/prod", "--reason", "x", "--scope", "all"],
     "rollback not sent: --scope: a held stage rolls back by the request's rollback scope"),
    (["abort", "x" * 1000, "--reason", "why"], "ROLLOUT_ID: "),
    (["abort", "payments/\n2.4.0", "--reason", "why"], "ROLLOUT_ID: 'payments/\\n2.4.0' must be printable"),
    (["status", "payments/\udcff"], "ROLLOUT_ID: "),
    (["list", "--service", "x' OR '1'='1"], "--service: "),
]


@pytest.mark.parametrize(("args", "expected"), UPDATE_REFUSALS, ids=[" ".join(a[:1] + a[2:])[:50] for a, _ in UPDATE_REFUSALS])
def test_what_the_server_would_refuse_is_refused_here_naming_the_option(args, expected):
    res = run(*args, env=closed_env())
    assert res.exit_code == 2, res.output  # 4 would mean it tried to reach Temporal
    assert expected in res.output, res.output
    assert len([line for line in res.output.splitlines() if "not sent" in line or "ROLLOUT_ID" in line or "--service" in line]) == 1


@pytest.mark.parametrize("args", [["pause", "payments/2.4.0"], ["retry", "payments/2.4.0", "--stage", "eu-west-1/prod"]])
def test_an_optional_reason_left_out_is_not_refused_here(args):
    res = run(*args, env=closed_env())
    assert res.exit_code == 4, res.output  # it tried to reach Temporal: nothing refused it here
    assert "not sent" not in res.output


def test_every_update_command_is_covered_and_named_as_the_workflow_names_it():
    from temporalio import workflow as wf

    from bifrost_cli import ops
    from workflows.rollout.workflow import RolloutWorkflow

    defn = wf._Definition.must_from_class(RolloutWorkflow)
    assert defn.name == ops.ROLLOUT_WORKFLOW and ops.STATUS_QUERY in defn.queries
    assert set(ops.UPDATES) == set(defn.updates)
    commands = {a[0].replace("-", "_") for a, _ in UPDATE_REFUSALS}
    assert set(ops.UPDATES) <= commands


def _cli_in_thread(fn):
    """Run a CLI helper that calls asyncio.run (and exits) on its own thread, outside the test's event loop."""
    import threading

    result: dict = {}

    def target():
        try:
            result["value"] = fn()
        except SystemExit as done:
            result["exit"] = done.code

    t = threading.Thread(target=target)
    t.start()
    t.join(60)
    return result


@pytest.mark.parametrize("what", ["oversized payload", "workflow id too long"])
def test_a_temporal_refusal_says_what_was_refused_not_is_a_worker_running(env, monkeypatch, capsys, what):
    from bifrost_cli.main import _run
    from worker.connect import connect

    monkeypatch.setenv("TEMPORAL_ADDRESS", env.client.service_client.config.target_host)

    async def start():
        client = await connect()
        if what == "oversized payload":
            await client.start_workflow("RolloutWorkflow", "x" * (3 << 20), id="too-big", task_queue="nobody")
        else:
            await client.start_workflow("RolloutWorkflow", "x", id="r" * 1500, task_queue="nobody")

    result = _cli_in_thread(lambda: _run(start()))
    err = capsys.readouterr().err
    assert result.get("exit") == 2, (result, err)
    assert "Temporal refused the request" in err and "worker" not in err
    if what == "oversized payload":
        assert "Blob data size exceeds limit" in err and "larger than Temporal accepts" in err
    else:
        assert "WorkflowId exceeds maximum allowed length" in err and "Temporal does not accept that rollout id" in err


async def test_submit_wait_on_a_terminated_rollout_exits_1_with_the_reason(env, task_queue, tmp_path, monkeypatch):
    import asyncio
    import io

    from rich.console import Console
    from temporalio.service import RPCError

    from bifrost_cli import ops
    from tests.workflows.helpers import fleet, make_request, running_worker

    monkeypatch.setenv("TEMPORAL_ADDRESS", env.client.service_client.config.target_host)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", env.client.namespace)
    req = make_request(regions=[{"name": "us-east-1", "traffic_share": 1.0}], blast_radius={"canary_region": None},
                       approvals={"gates": [{"wave": 1}]})
    out = io.StringIO()
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        waiting = asyncio.ensure_future(ops.submit(req, wait=True, follow=False, task_queue=task_queue,
                                                   console=Console(file=out, width=200)))
        handle = env.client.get_workflow_handle(req.workflow_id)
        for _ in range(300):  # until the rollout waits at its gate
            try:
                if (await ops.query_status(handle)).status == "awaiting_approval":
                    break
            except RPCError:
                pass  # not started yet
            await asyncio.sleep(0.1)
        else:
            pytest.fail("the rollout never reached its approval gate")
        await handle.terminate(reason="[/red] operator pulled the plug")
        code = await asyncio.wait_for(waiting, 60)
    assert code == 1
    assert "failed: the rollout ended without a result" in out.getvalue()


def test_list_status_takes_every_status_of_every_listed_kind_and_says_them():
    """`--status` offers what the listed workflows' models allow (a revert's `reverted`, `invalid` too), and the
    help names each kind's statuses; a status no kind has is refused before Temporal is asked."""
    from typing import get_args

    from bifrost_cli.listed import LISTED, REVERT_WORKFLOW, ROLLOUT_WORKFLOW
    from common.types import RolloutStatus
    from common.vocabulary import RevertStatus

    assert LISTED == {ROLLOUT_WORKFLOW: get_args(RolloutStatus), REVERT_WORKFLOW: get_args(RevertStatus)}
    help_text = " ".join(run("list", "--help").output.split())
    for status in {*get_args(RolloutStatus), *get_args(RevertStatus)}:
        assert status in help_text, status
        res = run("list", "--status", status, env=closed_env())
        assert res.exit_code == 4, (status, res.output)  # accepted: it went on to reach Temporal
    assert "reverts: planning, queued, paused, reverting, reverted" in help_text, help_text
    res = run("list", "--status", "undone", env=closed_env())
    assert res.exit_code == 2 and "'undone' is not one of" in res.output, res.output
