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


# -- bounds (issue #12): every value a workflow must turn into a timer, a name or a payload ------------------
def canary(**kw) -> dict:
    return {"metrics": [{"name": "latency_p99", "kind": "latency"}], **kw}


def region(**kw) -> dict:
    return {"name": "us-east-1", "traffic_share": 1.0, **kw}


INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"canary": canary(analysis_minutes=INF)}, "canary.analysis_minutes: Input should be a finite number"),
        ({"canary": canary(analysis_minutes=1e308)}, "canary.analysis_minutes: Input should be less than or equal to 1440"),
        ({"canary": canary(analysis_minutes=-1)}, "canary.analysis_minutes: Input should be greater than or equal to 0"),
        ({"canary": canary(interval_seconds=0)}, "canary.interval_seconds: Input should be greater than or equal to 1"),
        ({"canary": canary(interval_seconds=3601)}, "canary.interval_seconds: Input should be less than or equal to 3600"),
        ({"canary": canary(analysis_minutes=1440, interval_seconds=7)},
         "canary.analysis_minutes: 1440 min at one sample every 7 s is 12343 samples per metric, more than the 11000"),
        ({"canary": canary(soak_check_minutes=1e-9)}, "canary.soak_check_minutes: a look every 1e-09 min is out of range"),
        ({"canary": canary(soak_check_minutes=0)}, "give at least 1/60 min (one second)"),
        ({"canary": canary(soak_check_minutes=NAN)}, "canary.soak_check_minutes: Input should be a finite number"),
        ({"canary": canary(soak_check_minutes=1441)}, "and at most 1440 min (24 h)"),
        ({"canary": canary(soak_check_minutes=300), "soak": {"test_hours": 0, "prod_hours": 2}},
         "canary.soak_check_minutes: a look every 300 min is longer than soak.prod_hours (2 h = 120 min); "
         "set canary.soak_check_minutes to at most 120"),
        ({"canary": canary(soak_check_minutes=0.5), "soak": {"test_hours": 0, "prod_hours": 336}},
         "over soak.prod_hours (336 h) is 40320 looks, more than 20160; raise canary.soak_check_minutes to at least 1"),
        ({"canary": canary(canary_replicas=1001)}, "canary.canary_replicas: Input should be less than or equal to 1000"),
        ({"canary": canary(baseline_replicas=10**30)}, "canary.baseline_replicas: Input should be less than or equal to 1000"),
        ({"canary": {"metrics": [{"name": f"m{i}"} for i in range(51)]}}, "canary.metrics: List should have at most 50 items"),
        ({"canary": {"metrics": [{"name": "m" * 101}]}}, "canary.metrics.0: name is 101 characters long; at most 100"),
        ({"canary": {"metrics": [{"name": "m", "allowed_increase": INF}]}}, "canary.metrics.0: allowed_increase must be a finite number"),
        ({"soak": {"prod_hours": INF}}, "soak.prod_hours: Input should be a finite number"),
        ({"soak": {"test_hours": 337}}, "soak.test_hours: Input should be less than or equal to 336"),
        ({"approvals": {"timeout_hours": INF}}, "approvals.timeout_hours: Input should be a finite number"),
        ({"approvals": {"timeout_hours": 0}}, "approvals.timeout_hours: Input should be greater than 0"),
        ({"approvals": {"timeout_hours": 721}}, "approvals.timeout_hours: Input should be less than or equal to 720"),
        ({"approvals": {"gates": [{"wave": 1001}]}}, "approvals.gates.0.wave: Input should be less than or equal to 1000"),
        ({"approvals": {"approvers": ["a\nb"]}}, "approvals.approvers.0: must be printable text on one line"),
        ({"blast_radius": {"max_parallel_regions": 65}}, "blast_radius.max_parallel_regions: Input should be less than or equal to 64"),
        ({"blast_radius": {"max_parallel_prod_regions": 65}}, "blast_radius.max_parallel_prod_regions: Input should be less"),
        ({"blast_radius": {"prod_traffic_caps": [INF]}}, "blast_radius.prod_traffic_caps.0: Input should be a finite number"),
        ({"regions": [region(name=f"r{i}", traffic_share=1 / 65) for i in range(65)]}, "regions: List should have at most 64 items"),
        ({"regions": [region(name="r" * 64)]}, "regions.0.name: String should have at most 63 characters"),
        ({"service": "s" * 51}, "service: String should have at most 50 characters"),
        ({"service": "s" * 300}, "service: String should have at most 50 characters"),
        ({"version": "v" * 129}, "version: String should have at most 128 characters"),
        ({"requested_by": "r" * 201}, "requested_by: 201 characters; at most 200 are allowed"),
        ({"requested_by": "ci\x1b[31m"}, "requested_by: must be printable text on one line"),
        ({"requested_by": "   "}, "requested_by: must not be blank"),
        ({"change": {"description": "d" * 2001}}, "change.description: String should have at most 2000 characters"),
        ({"change": {"url": "u" * 2001}}, "change.url: String should have at most 2000 characters"),
        ({"change": {"commit": "\udcff"}}, "change.commit: "),
        ({"canary": {"metrics": [{"name": "m", "groups": ["g\udcff"]}]}}, "canary.metrics.0.groups.0: contains a lone surrogate"),
        ({"regions": [region(timezone="Europe")]}, "regions.0.timezone: unknown IANA time zone 'Europe'"),
        ({"regions": [region(timezone="x" * 300)]}, "regions.0.timezone: unknown IANA time zone 'xxxxxxxx"),
        ({"regions": [region(timezone="../../../etc/passwd")]}, "regions.0.timezone: unknown IANA time zone"),
        ({"regions": [region(windows=[{"start": 540}])]},
         'regions.0.windows.0.start: expected a local time "HH:MM" as a string, got the number 540; did you mean "09:00"?'),
        ({"regions": [region(windows=[{"end": 17.5}])]}, 'regions.0.windows.0.end: expected a local time "HH:MM" as a string'),
        ({"regions": [region(windows=[{"start": "09:00+02:00"}])]}, "regions.0.windows.0.start: expected a local time"),
        ({"regions": [region(windows=[{"start": "24:00"}])]}, "from 00:00 to 23:59"),
        ({"regions": [region(windows=[{"days": []}])]}, "regions.0.windows.0.days: List should have at least 1 item"),
    ],
)
def test_bounds_name_the_field(change, expected):
    found = problems({**BASE, **change})
    assert any(expected in p for p in found), found


@pytest.mark.parametrize(
    ("artifact", "expected"),
    [
        ("", "it is empty"),
        ("  registry.example.com/payments:2.4.0 ", "remove the spaces around it"),
        ("registry.example.com/Payments:2.4.0", "the repository path must be lower case ('Payments')"),
        ("registry.example.com/payments:2.4.0;rm -rf /", "it contains ';'"),
        ("registry.example.com/payments:2.4.0 && curl x", "it contains ' '"),
        ("payments:-bad", "the tag after ':' must be"),
        ("payments:" + "t" * 129, "the tag after ':' must be"),
        ("payments@sha256:abc", "the digest after '@' must be sha256: and 64 lowercase hex digits"),
        ("payments//x", "is not a repository path component"),
        ("bad_host.example.com:99999999/x", "is not a registry host[:port]"),
        ("$(reboot)", "it contains '$'"),
    ],
)
def test_artifact_must_be_an_oci_image_reference(artifact, expected):
    found = problems({**BASE, "artifact": artifact})
    assert any(p.startswith("artifact: not an OCI image reference") and expected in p for p in found), found


@pytest.mark.parametrize("artifact", [
    "payments", "payments:2.4.0", "registry.example.com/payments:2.4.0", "localhost:5000/team/pay-ments_x:v1.2.3-rc.1",
    "ghcr.io/org/a.b/c__d:latest", "registry.example.com:443/payments@sha256:" + "0" * 64,
    "registry.example.com/payments:2.4.0@sha256:" + "ab" * 32, "Registry.Example.com/payments:2",
])
def test_real_image_references_are_accepted(artifact):
    assert parse_request({**BASE, "artifact": artifact}).image == artifact


def test_windows_take_local_clock_times_and_survive_the_round_trip():
    from datetime import time

    req = parse_request({**BASE, "regions": [region(timezone="Europe/Dublin",
                                                     windows=[{"start": "08:30", "end": "17:45:30"}])]})
    w = req.regions[0].windows[0]
    assert (w.start, w.end) == (time(8, 30), time(17, 45, 30))
    again = type(req).model_validate_json(req.model_dump_json())  # as the workflow receives it
    assert again.regions[0].windows[0] == w


def test_the_demo_requests_compressed_time_is_within_the_bounds():
    from pathlib import Path

    for path in sorted(Path("deploy/examples").glob("demo-*.yaml")):
        if "fleet" not in path.name:
            req = load_request(path)
            assert req.canary.analysis_minutes == 0.05 and req.canary.soak_check_minutes == 0.05


def test_a_request_at_every_bound_is_accepted():
    from tests.workflows.test_bounds import at_the_bounds

    req = at_the_bounds()
    assert len(req.service) == 50 and req.service.startswith("s") and req.approvals.timeout_hours == 720 and req.canary.analysis_minutes == 1440


def test_the_longest_ids_fit_temporal():
    req = parse_request({**BASE, "service": "s" * 50, "version": "v" * 128, "regions": [region(name="r" * 63)]})
    stage_id = f"{req.workflow_id}/{'r' * 63}/prod"
    assert len(stage_id.encode()) < 1000 and len(f"{req.service}-baseline") <= 63


def test_one_problem_line_per_field_even_for_huge_or_odd_values():
    found = problems({**BASE, "rollback_scope": "x" * 100_000, "colour\nred": 1})
    assert all("\n" not in p and len(p) < 600 for p in found), found


def test_hold_on_failure_and_its_timeout_are_checked_naming_the_field():
    held = {**BASE, "regions": [{"name": "us-east-1", "traffic_share": 1.0, "on_failure": "hold"}]}
    req = parse_request({**held, "hold": {"timeout_minutes": 0.05, "on_timeout": "promote"}})
    assert req.regions[0].on_failure == "hold" and req.hold.timeout_minutes == 0.05 and req.hold.on_timeout == "promote"
    assert parse_request(held).hold.on_timeout == "rollback" and parse_request(held).hold.timeout_minutes == 1440
    assert any(p.startswith("hold.timeout_minutes:") for p in problems({**held, "hold": {"timeout_minutes": 0}}))
    assert any(p.startswith("hold.timeout_minutes:") for p in problems({**held, "hold": {"timeout_minutes": 20161}}))
    assert any(p.startswith("hold.on_timeout:") for p in problems({**held, "hold": {"on_timeout": "retry"}}))
    alone = problems({**BASE, "regions": [{"name": "us-east-1", "traffic_share": 1.0, "on_failure": "evacuate_and_hold"}]})
    assert any("evacuate needs another production region" in p for p in alone), alone
    no_prod = problems({**BASE, "regions": [{"name": "us-east-1", "traffic_share": 1.0},
                                            {"name": "eu-west-1", "environments": ["test"], "on_failure": "evacuate_and_hold"}]})
    assert any("regions.eu-west-1.on_failure: only a production stage carries traffic" in p for p in no_prod), no_prod
    assert any(p.startswith("regions.0.on_failure:") for p in problems(
        {**BASE, "regions": [{"name": "us-east-1", "traffic_share": 1.0, "on_failure": "hold_forever"}]}))
