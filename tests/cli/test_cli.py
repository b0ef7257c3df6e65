"""The `bifrost` CLI: offline commands, exit codes, and a submit against a real dev server."""

from __future__ import annotations

import socket

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
