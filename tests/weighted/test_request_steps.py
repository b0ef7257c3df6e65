"""`canary.traffic`: validated naming the field, shown by `bifrost plan`, refused there when the targets lack the router."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from bifrost_cli.main import cli
from common.traffic.canary import MAX_CANARY_STEPS, CanaryTraffic
from workflows.request import RequestError, parse_request

pytestmark = pytest.mark.unit

BASE = {
    "service": "payments", "version": "1.2.3", "requested_by": "ci",
    "regions": [{"name": "us-east-1", "traffic_share": 1.0}],
    "canary": {"metrics": [{"name": "latency_p99", "kind": "latency"}]},
}


def with_traffic(traffic: object, **canary: object) -> dict:
    return {**BASE, "canary": {**BASE["canary"], **canary, "traffic": traffic}}


def problems(data: dict) -> list[str]:
    with pytest.raises(RequestError) as info:
        parse_request(data, "req.yaml")
    return info.value.problems


def test_without_traffic_nothing_changes():
    assert parse_request(BASE).canary.traffic is None


def test_steps_and_their_weights():
    req = parse_request(with_traffic({"router": "gateway-api", "steps": [5, 25, 50], "baseline_share": "same"}))
    t = req.canary.traffic
    assert t is not None and t.steps == [5, 25, 50]
    assert [(w.canary, w.baseline, w.primary) for w in t.planned()] == [(5, 5, 90), (25, 25, 50), (50, 50, 0)]
    assert CanaryTraffic(router="alb", steps=[50]).planned()[0].primary == 0  # canary + baseline = 100 at most


@pytest.mark.parametrize(("traffic", "expected"), [
    ({"router": "gateway-api", "steps": [25, 5]}, "canary.traffic.steps: steps must be strictly increasing"),
    ({"router": "gateway-api", "steps": [5, 5]}, "canary.traffic.steps: steps must be strictly increasing"),
    ({"router": "gateway-api", "steps": [0, 5]}, "canary.traffic.steps: steps[0] = 0"),
    ({"router": "gateway-api", "steps": [5, 60]}, "canary.traffic: steps: with baseline_share: same"),
    ({"router": "gateway-api", "steps": [5, 101]}, "canary.traffic.steps: steps[1] = 101"),
    ({"router": "gateway-api", "steps": list(range(1, MAX_CANARY_STEPS + 2))}, "canary.traffic.steps: List should have at most"),
    ({"router": "gateway-api", "steps": []}, "canary.traffic.steps: List should have at least 1"),
    ({"router": "istio", "steps": [5]}, "canary.traffic.router: Input should be"),
    ({"router": "alb", "steps": [5], "baseline_share": "double"}, "canary.traffic.baseline_share: Input should be"),
    ({"router": "alb", "steps": [5], "stepz": 1}, "canary.traffic.stepz"),
    ({"router": "alb", "steps": ["5"]}, "canary.traffic.steps.0"),
])
def test_bad_steps_name_the_field(traffic, expected):
    found = problems(with_traffic(traffic))
    assert any(p.startswith(expected) for p in found), found


def test_steps_need_an_analysis_window():
    found = problems(with_traffic({"router": "alb", "steps": [5]}, analysis_minutes=0))
    assert any("canary.traffic" in p and "analysis_minutes" in p for p in found), found


def _files(tmp_path, router: str, deployer: dict) -> tuple[str, str]:
    req = tmp_path / "r.yaml"
    req.write_text(yaml.safe_dump(with_traffic({"router": router, "steps": [5, 25, 50]})))
    targets = tmp_path / "t.yaml"
    targets.write_text(yaml.safe_dump({"defaults": {"deployer": deployer, "metrics": {"kind": "simulated"}}}))
    return str(req), str(targets)


def test_plan_shows_the_steps_of_each_stage(tmp_path):
    req, _ = _files(tmp_path, "simulated", {"kind": "simulated"})
    res = CliRunner().invoke(cli, ["plan", req], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert res.output.count("canary steps 5% → 25% →") == 2, res.output  # test and prod (the cell may wrap after)


def test_plan_refuses_a_router_the_targets_do_not_configure(tmp_path):
    req, targets = _files(tmp_path, "gateway-api", {"kind": "simulated"})
    res = CliRunner().invoke(cli, ["plan", req, "--targets", targets], catch_exceptions=False)
    assert res.exit_code == 2, res.output
    assert "canary.traffic.router: gateway-api" in res.output and "us-east-1/prod" in res.output
    ok, targets = _files(tmp_path, "simulated", {"kind": "simulated"})
    assert CliRunner().invoke(cli, ["plan", ok, "--targets", targets], catch_exceptions=False).exit_code == 0
