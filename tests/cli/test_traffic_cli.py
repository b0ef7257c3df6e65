"""`bifrost evacuate`, `restore` and `traffic`: help, refusals with exit codes, and a full round on a dev server."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from bifrost_cli import traffic
from bifrost_cli.main import cli
from tests.cli.test_cli import _closed_port
from tests.workflows.evacuation_helpers import running_worker, service, simulated_registry, wait_for
from workflows.evacuation.settings import EvacuationInput, evacuation_id
from workflows.evacuation.workflow import EvacuationWorkflow


def run(*args: str, env: dict | None = None):
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def test_help_teaches_with_examples_and_exit_codes():
    out = run("evacuate", "--help").output
    assert "bifrost evacuate eu-west-1 --service payments --to us-east-1,ap-south-1 --steps 30,10,0" in out
    assert "2  refused before anything changed" in out and "3  aborted, or another traffic change" in out
    assert "bifrost restore eu-west-1 --service payments --wait" in run("restore", "--help").output
    assert "bifrost traffic abort payments --reason" in run("traffic", "--help").output
    assert "evacuate" in run("--help").output


@pytest.mark.parametrize("args, words", [
    (["--steps", "30,40"], "steps: levels must strictly decrease"),
    (["--steps", "100,0"], "from 0 to 99"),
    (["--to", "eu-west-1"], "receivers: eu-west-1 is the region being evacuated"),
    (["--headroom", "0.5"], "headroom: Input should be greater than or equal to 1"),
])
def test_bad_input_exits_2_before_contacting_temporal(args, words):
    res = run("evacuate", "eu-west-1", "--service", "payments", *args,
              env={"TEMPORAL_ADDRESS": f"127.0.0.1:{_closed_port()}"})  # nothing listens: it must not get that far
    assert res.exit_code == 2, res.output
    assert "refused, nothing was changed" in res.output and words in res.output


def test_unreachable_temporal_exits_4():
    res = run("evacuate", "eu-west-1", "--service", "payments", env={"TEMPORAL_ADDRESS": f"127.0.0.1:{_closed_port()}"})
    assert res.exit_code == 4 and "could not reach Temporal" in res.output


def test_exit_codes_follow_the_outcome():
    assert [traffic.exit_code_for(s) for s in ("evacuated", "restored", "reverted", "failed", "refused", "aborted")] == \
        [0, 0, 1, 1, 2, 3]


async def test_evacuate_conflict_status_and_restore_against_a_dev_server(env, task_queue, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TEMPORAL_ADDRESS", env.client.service_client.config.target_host)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", env.client.namespace)
    registry, _ = simulated_registry(ttl=1)
    svc = service()
    evac = EvacuationInput(service=svc, region="eu-west-1", requested_by="alice", reason="INC-7",
                           health_baseline_minutes=1, health_interval_seconds=1, judge={"min_samples": 1})
    async with running_worker(env.client, registry, task_queue, tmp_path):
        with pytest.raises(SystemExit) as no_restore:
            await traffic.run_restore(svc, "eu-west-1", "prod", who="bob", reason="", wait=True, task_queue=task_queue)
        assert no_restore.value.code == 2 and "no evacuation of eu-west-1" in capsys.readouterr().err

        assert await traffic.run_traffic(evac, wait=False, task_queue=task_queue) == 0  # returns once planned
        out = capsys.readouterr().out
        assert f"started {evacuation_id(svc)}" in out and "eu-west-1" in out and "follow it: bifrost traffic status" in out
        with pytest.raises(SystemExit) as busy:  # one traffic change per service at a time
            await traffic.run_traffic(evac.model_copy(update={"region": "us-east-1"}), wait=False, task_queue=task_queue)
        assert busy.value.code == 3 and "another traffic change of" in capsys.readouterr().err

        handle = env.client.get_workflow_handle(evacuation_id(svc))
        await wait_for(handle, lambda s: s.finished)
        assert await traffic.show_status(svc, as_json=False) == 0
        out = capsys.readouterr().out
        assert "evacuate eu-west-1" in out and "evacuated" in out and "alice: evacuate eu-west-1: INC-7" in out

        assert await traffic.run_restore(svc, "eu-west-1", "prod", who="bob", reason="fixed", wait=True,
                                         task_queue=task_queue) == 0
        out = capsys.readouterr().out
        assert "restoring from the evacuation" in out and "restored:" in out
        state = await handle.query(EvacuationWorkflow.status)
        assert state.direction == "restore" and state.weights_after == {"us-east-1": 100, "eu-west-1": 100, "ap-south-1": 100}

        with pytest.raises(SystemExit) as again:
            await traffic.run_restore(svc, "eu-west-1", "prod", who="bob", reason="", wait=True, task_queue=task_queue)
        assert again.value.code == 2 and "already restored" in capsys.readouterr().err


async def test_a_refusal_from_the_worker_exits_2_with_its_reasons(env, task_queue, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TEMPORAL_ADDRESS", env.client.service_client.config.target_host)
    registry, _ = simulated_registry()
    inp = EvacuationInput(service=service(), region="mars-1", requested_by="alice")
    async with running_worker(env.client, registry, task_queue, tmp_path):
        assert await traffic.run_traffic(inp, wait=True, task_queue=task_queue) == 2
    captured = capsys.readouterr()
    assert "region: mars-1 has no traffic target" in captured.out + captured.err


async def test_evacuations_and_restores_of_two_regions_keep_each_other_evacuated(env, task_queue, tmp_path, monkeypatch, capsys):
    """Issue #17 item 3: eu-west-1 then ap-south-1 evacuated; restoring eu-west-1 leaves ap-south-1 at 0, in steps,
    pre-warmed; restoring ap-south-1 then gives back the weights before either evacuation."""
    monkeypatch.setenv("TEMPORAL_ADDRESS", env.client.service_client.config.target_host)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", env.client.namespace)
    registry, _ = simulated_registry(ttl=1)
    svc = service()
    handle = env.client.get_workflow_handle(evacuation_id(svc))
    quick = {"health_baseline_minutes": 1, "health_interval_seconds": 1, "judge": {"min_samples": 1}}

    async def state():
        return await handle.query(EvacuationWorkflow.status)

    async with running_worker(env.client, registry, task_queue, tmp_path):
        for region in ("eu-west-1", "ap-south-1"):
            evac = EvacuationInput(service=svc, region=region, requested_by="alice", reason="INC-9", **quick)
            assert await traffic.run_evacuate(evac, wait=True, task_queue=task_queue) == 0, capsys.readouterr()
        evacuated = await state()
        assert evacuated.weights_after == {"us-east-1": 255, "eu-west-1": 0, "ap-south-1": 0}
        assert evacuated.home_weights == {"us-east-1": 100, "eu-west-1": 100, "ap-south-1": 100}

        assert await traffic.run_restore(svc, "eu-west-1", "prod", who="bob", reason="", wait=True, task_queue=task_queue) == 0
        eu = await state()
        assert eu.status == "restored" and len(eu.planned) == 3, eu.planned
        assert all(step["ap-south-1"] == 0 for step in eu.planned) and eu.weights_after["ap-south-1"] == 0
        assert eu.weights_after["eu-west-1"] in (127, 128)
        assert eu.replicas_before["eu-west-1"] == 4 and eu.scaled["eu-west-1"] == 8  # half the traffic: ceil(4 x 1.5 x 1.2)
        assert any(step.health and "eu-west-1" in step.health for step in eu.steps)  # the restored region is judged

        assert await traffic.run_restore(svc, "ap-south-1", "prod", who="bob", reason="", wait=True, task_queue=task_queue) == 0
        ap = await state()
        assert ap.status == "restored" and len(ap.planned) == 3
        assert ap.weights_after == {"us-east-1": 100, "eu-west-1": 100, "ap-south-1": 100}
