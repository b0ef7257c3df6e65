"""Request validation: bad files are refused with messages that name the field and say what is allowed."""

from __future__ import annotations

import json

import pytest

from tests.workflows.helpers import make_request
from workflows.request import RequestError, load_request, parse_request

BASE = {
    "service": "payments", "version": "1.2.3", "requested_by": "ci",
    "regions": [{"name": "us-east-1", "traffic_share": 1.0}],
    "canary": {"metrics": [{"name": "latency_p99", "kind": "latency"}]},
}


def problems(data: dict) -> list[str]:
    with pytest.raises(RequestError) as info:
        parse_request(data, "req.yaml")
    return info.value.problems


def test_examples_in_deploy_are_valid():
    from pathlib import Path

    for path in sorted(Path("deploy/examples").glob("*request*.yaml")) + sorted(Path("deploy/examples").glob("demo-*.yaml")):
        if "fleet" in path.name:
            continue
        req = load_request(path)
        assert req.service and req.regions


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"service": "Payments!"}, "service: String should match pattern"),
        ({"version": ""}, "version: String should have at least 1 character"),
        ({"regions": []}, "regions: List should have at least 1 item"),
        ({"rollback_scope": "planet"}, "rollback_scope: Input should be 'stage', 'region' or 'all' (got 'planet')"),
        ({"on_conflict": "wait"}, "on_conflict: Input should be 'queue', 'supersede' or 'reject'"),
        ({"regions": [{"name": "us-east-1", "traffic_share": 0.6}]}, "production shares must add up to 1.0, got 0.6"),
        ({"regions": [{"name": "us-east-1", "traffic_share": 1.0, "environments": ["prod", "prod"]}]}, "environments must not repeat"),
        ({"regions": [{"name": "us-east-1", "traffic_share": 1.0, "timezone": "Mars/Olympus"}]}, "unknown IANA time zone 'Mars/Olympus'"),
        ({"blast_radius": {"canary_region": "eu-west-9"}}, "blast_radius.canary_region: 'eu-west-9' is not a production region"),
        ({"blast_radius": {"prod_traffic_caps": [0.5, 0.2]}}, "prod_traffic_caps must not shrink"),
        ({"soak": {"prod_hours": -1}}, "soak.prod_hours: Input should be greater than or equal to 0"),
        ({"approvals": {"gates": [{"stage": "eu-west-1/prod"}]}}, "approvals.gates[0].stage: 'eu-west-1/prod' is not a stage"),
        ({"colour": "blue"}, "colour: unknown field"),
        ({"canary": {"metrics": [{"name": "a"}, {"name": "a"}]}}, "metric names must be unique; repeated: a"),
        ({"canary": {"metrics": [{"name": "a", "direction": "up"}]}}, "canary.metrics.0.direction: Input should be 'increase', 'decrease' or 'either'"),
        ({"canary": {"metrics": [{"name": "a", "groups": ["x"]}], "judge": {"groups": {"x": 120}}}}, "canary.judge.groups: group weights must be between 0 and 100"),
    ],
)
def test_bad_requests_name_the_field(change, expected):
    found = problems({**BASE, **change})
    assert any(expected in p for p in found), found


def test_every_problem_is_reported_at_once():
    found = problems({**BASE, "service": "", "rollback_scope": "x", "requested_by": None})
    fields = {p.split(":")[0] for p in found}
    assert {"service", "rollback_scope", "requested_by"} <= fields


def test_missing_required_fields_are_named():
    found = problems({"service": "payments"})
    assert "version: required field is missing" in found
    assert "canary: required field is missing" in found


def test_file_errors_are_clear(tmp_path):
    bad_yaml = tmp_path / "r.yaml"
    bad_yaml.write_text("service: [unclosed\n")
    with pytest.raises(RequestError, match="not valid YAML"):
        load_request(bad_yaml)
    with pytest.raises(RequestError, match="cannot read file"):
        load_request(tmp_path / "missing.yaml")
    good = tmp_path / "r.json"
    good.write_text(json.dumps(BASE))
    assert load_request(good).workflow_id == "rollout/payments/1.2.3"


def test_environments_are_ordered_test_first():
    req = parse_request({**BASE, "regions": [{"name": "us-east-1", "traffic_share": 1.0, "environments": ["prod", "test"]}]})
    assert req.regions[0].environments == ["test", "prod"]


def test_helper_request_is_valid():
    assert make_request().canary.metrics[0].name == "latency_p99"
