"""Hostile input, generated: whatever bytes, JSON or YAML a request or targets file holds, the loaders either
accept it (and then the request plans and survives the trip to a workflow) or refuse it with the project's
own error, within a second. Never any other exception.
"""

from __future__ import annotations

import copy
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from activities.adapters.targets import TargetsError, TargetsFile, load_targets, parse_targets
from workflows.plan import PlanError, build_plan
from workflows.request import RequestError, RolloutRequest, load_request, parse_request
from workflows.stage.models import StageInput

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"
REQUEST_EXAMPLES = [EXAMPLES / n for n in ("request.yaml", "demo-good.yaml", "demo-bad.yaml")]
TARGETS_EXAMPLE = EXAMPLES / "targets.yaml"

# Each input must be handled within one second of this process's CPU time (check_request / check_targets):
# CPU time, not wall time, so that a busy machine cannot fail the test; hypothesis' own deadline is off for that reason.
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


# -- what "handled" means --------------------------------------------------------------------------
def check_request(load: Any) -> str:
    """Run `load`; an accepted request must plan (or raise PlanError) and survive the JSON trip to a workflow."""
    began = time.process_time()
    try:
        req = load()
    except RequestError as err:
        assert err.problems and all(isinstance(p, str) and "\n" not in p for p in err.problems), err.problems
        outcome = "refused"
    else:
        assert isinstance(req, RolloutRequest)
        again = RolloutRequest.model_validate_json(req.model_dump_json())  # what the workflow decodes
        assert again == req
        for env in ("test", "prod"):  # what each stage decodes
            stage = StageInput(rollout_id=req.workflow_id, service=req.service, version=req.version, image=req.image,
                               region=req.regions[0].name, environment=env, canary=req.canary, soak_hours=req.soak.hours(env))
            assert StageInput.model_validate_json(stage.model_dump_json()) == stage
        try:
            build_plan(req)
            outcome = "planned"
        except PlanError:
            outcome = "plan refused"
    assert time.process_time() - began < 1.0
    return outcome


def check_targets(load: Any) -> str:
    began = time.process_time()
    try:
        assert isinstance(load(), TargetsFile)
        outcome = "accepted"
    except TargetsError as err:
        assert err.problems and all("\n" not in p for p in err.problems), err.problems
        outcome = "refused"
    assert time.process_time() - began < 1.0
    return outcome


# -- strategies ------------------------------------------------------------------------------------
ODD_TEXT = st.sampled_from([
    "", " ", "[/red]", "[/]", "[bold]x[/bold", ":smile:", "\x1b[31mred", "a\nb", "\t", "\u202e", "💥", "\udcff", "NaN",
    "inf", "-Infinity", "1e999", "09:00+02:00", "24:00", "Europe", "../../../etc/passwd", "x" * 10_000, "ß" * 300,
    "registry/x:1;rm -rf /", "  payments:1 ", "Payments:1", "$(reboot)", "%s%n", "{service}", "\\", "'", '"', "~", "null",
])
ODD_NUMBER = st.sampled_from([
    math.inf, -math.inf, math.nan, 1e308, -1e308, 1e-308, 1e-9, 1e-7, 0.0, -0.0, -1, -1e12, 1e12, 10**30, -(10**30),
    2**63, 2**64 + 1, 0.5, 1 / 60, 1 / 61, 336, 337, 720, 720.0001, 1440, 1441, 3600, 3601, 11_000, 20_160, 1000, 1001, 64, 65,
])
ODD_VALUE = st.one_of(
    ODD_TEXT, ODD_NUMBER, st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=30),
    st.dates(), st.datetimes(), st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    st.just([[[[[]]]]]), st.just({"[/red]": "[/]"}),
)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=40,
)

YAML_TOKENS = st.sampled_from([
    "a", "b", "service", "regions", "canary", "metrics", "name", ":", ": ", "- ", "-", "\n", "\n  ", "\n    ", " ", "[", "]",
    "{", "}", ",", "&a ", "*a", "&b ", "*b", "<<: *a", "!!python/object:os.system", "!!binary", "!!set", "!!float ", "? ",
    "|", ">", "'", '"', "#", "---", "...", "%YAML 1.1", ".inf", "-.inf", ".nan", "1e999", "9:00", "2026-13-45", "0x1F",
    "0o777", "1_000", "~", "null", "yes", "NO", "\t", "\\", "\udcff", "\x00", "\ufeff", "[/red]", "9" * 5000,
])


def paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside nested dicts and lists."""
    out = [prefix] if prefix else []
    if isinstance(data, dict):
        for k, v in data.items():
            out += paths(v, (*prefix, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += paths(v, (*prefix, i))
    return out


@st.composite
def mutated(draw: st.DrawFn, sources: list[Path]) -> Any:
    """An example file with a few fields deleted, or replaced by odd types, huge, negative, infinite or long values."""
    data = yaml.safe_load(draw(st.sampled_from(sources)).read_text())
    for _ in range(draw(st.integers(1, 4))):
        where = paths(data)
        if not where:
            break
        path = draw(st.sampled_from(where))
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        if draw(st.booleans()) and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = copy.deepcopy(draw(ODD_VALUE))
    return data


def write(tmp: Path, name: str, content: bytes) -> Path:
    path = tmp / name
    path.write_bytes(content)
    return path


def dump_yaml(data: Any) -> bytes:
    return yaml.safe_dump(data, allow_unicode=True).encode("utf-8", "surrogatepass")


def dump_json(data: Any) -> bytes:
    return json.dumps(data, default=str).encode("utf-8", "surrogatepass")


# -- the properties --------------------------------------------------------------------------------
@FUZZ
@given(content=st.binary(max_size=2000), suffix=st.sampled_from([".yaml", ".json"]))
def test_arbitrary_bytes(tmp_path_factory, content, suffix):
    tmp = tmp_path_factory.mktemp("bytes")
    path = write(tmp, "f" + suffix, content)
    check_request(lambda: load_request(path))
    check_targets(lambda: load_targets(path))


@FUZZ
@given(data=JSON)
def test_arbitrary_json(tmp_path_factory, data):
    path = write(tmp_path_factory.mktemp("json"), "f.json", dump_json(data))
    check_request(lambda: load_request(path))
    check_targets(lambda: load_targets(path))
    check_request(lambda: parse_request(data))
    check_targets(lambda: parse_targets(data))


@FUZZ
@given(tokens=st.lists(YAML_TOKENS, max_size=60))
def test_arbitrary_yaml_text(tmp_path_factory, tokens):
    path = write(tmp_path_factory.mktemp("yaml"), "f.yaml", "".join(tokens).encode("utf-8", "surrogatepass"))
    check_request(lambda: load_request(path))
    check_targets(lambda: load_targets(path))


@FUZZ
@given(data=mutated(REQUEST_EXAMPLES))
def test_mutated_example_requests(tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("req")
    check_request(lambda: parse_request(data))
    check_request(lambda: load_request(write(tmp, "r.yaml", dump_yaml(data))))
    check_request(lambda: load_request(write(tmp, "r.json", dump_json(data))))


@FUZZ
@given(data=mutated([TARGETS_EXAMPLE]))
def test_mutated_example_targets(tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("targets")
    check_targets(lambda: parse_targets(data))
    check_targets(lambda: load_targets(write(tmp, "t.yaml", dump_yaml(data))))


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_mutations_do_get_past_the_parser(data):
    """A guard for the guards: mutated examples reach validation, and some are still accepted and planned."""
    outcomes = {check_request(lambda: parse_request(data.draw(mutated(REQUEST_EXAMPLES)))) for _ in range(5)}
    assume(outcomes != {"refused"})
    assert outcomes & {"planned", "plan refused"}


@pytest.mark.parametrize("source", REQUEST_EXAMPLES, ids=lambda p: p.name)
def test_the_examples_themselves_plan(source):
    assert check_request(lambda: load_request(source)) == "planned"


def test_odd_values_include_what_broke_bifrost_before():
    """Issue #12's reproductions, each in one place: all refused with the project's error."""
    base = yaml.safe_load(REQUEST_EXAMPLES[1].read_text())
    cases = [("canary", "analysis_minutes", math.inf), ("soak", "prod_hours", 1e308), ("canary", "soak_check_minutes", 1e-9),
             ("canary", "soak_check_minutes", 1e-7), ("approvals", "timeout_hours", 1e12), (None, "service", "s" * 300),
             (None, "artifact", ""), (None, "artifact", "  registry/x:1 "), (None, "artifact", "Registry/X:1"),
             (None, "artifact", "registry/x:1;rm -rf /"), (None, "requested_by", "[/red]\n")]
    for section, field, value in cases:
        data = copy.deepcopy(base)
        (data.setdefault(section, {}) if section else data)[field] = value
        assert check_request(lambda d=data: parse_request(d)) == "refused", (section, field, value)
    for zone in ("Europe", "x" * 300, "America/"):
        data = copy.deepcopy(base)
        data["regions"][0]["timezone"] = zone
        assert check_request(lambda d=data: parse_request(d)) == "refused", zone
    data = copy.deepcopy(base)
    data["regions"][0]["windows"] = [{"start": 540, "end": "17:00"}]
    assert check_request(lambda: parse_request(data)) == "refused"
