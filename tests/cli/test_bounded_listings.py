"""Refusals list at most 50 lines of problems (issue #29 c): 60,000 unknown keys are not 4 MB of errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from pydantic import ValidationError
from temporalio.api.common.v1 import Payload
from temporalio.exceptions import ApplicationError

from activities.adapters.targets import TargetsError, load_targets
from bifrost_cli.exits import EXIT_INVALID
from bifrost_cli.main import cli
from common.problems import MAX_PROBLEM_CHARS, MAX_PROBLEMS, bounded, joined, payload_problems
from common.types import INVALID_PAYLOAD
from workflows.rollout.updates import Pause

EXAMPLE = Path(__file__).parents[2] / "deploy" / "examples" / "demo-good.yaml"
KEYS = 60_000


def flooded(path: Path, doc: dict[str, Any]) -> Path:
    """`doc` with 60,000 unknown keys, as compact JSON (under the loader's 1 MiB limit)."""
    path.write_text(json.dumps({**doc, **{f"k{i}": 1 for i in range(KEYS)}}, separators=(",", ":")))
    return path


def test_plan_of_a_file_with_60000_unknown_keys_lists_49_and_counts_the_rest(tmp_path: Path):
    path = flooded(tmp_path / "req.json", yaml.safe_load(EXAMPLE.read_text()))
    res = CliRunner().invoke(cli, ["plan", str(path)], catch_exceptions=False)
    lines = res.output.splitlines()
    assert res.exit_code == EXIT_INVALID
    assert len(lines) <= 52, (len(lines), lines[:3], lines[-3:])  # header, 50 lines of listing, the hint
    assert "  - k0: unknown field" in res.output and f"… and {KEYS - MAX_PROBLEMS + 1} more problems" in res.output
    assert len(res.output) < 20_000, len(res.output)  # was 4 MB; now the 59,951 unlisted problems are only counted


def test_submit_refuses_the_same_file_in_as_few_lines(tmp_path: Path):
    path = flooded(tmp_path / "req.json", yaml.safe_load(EXAMPLE.read_text()))
    res = CliRunner().invoke(cli, ["submit", str(path)], catch_exceptions=False)
    assert res.exit_code == EXIT_INVALID and len(res.output.splitlines()) <= 52, res.output[-300:]


def test_a_targets_file_with_60000_unknown_keys_is_refused_in_a_bounded_listing(tmp_path: Path):
    doc = {"targets": [{"region": "us-east-1", "environment": "prod", "deployer": {"kind": "simulated"}}]}
    with pytest.raises(TargetsError) as got:
        load_targets(flooded(tmp_path / "targets.json", doc))
    assert len(str(got.value).splitlines()) <= 1 + MAX_PROBLEMS and "more problems" in str(got.value)


def test_an_input_with_60000_unknown_fields_fails_with_a_bounded_invalid_payload():
    from worker.converter import DATA_CONVERTER

    raw = Payload(metadata={"encoding": b"json/plain"},
                  data=json.dumps({"by": "alice", **{f"k{i}": 1 for i in range(KEYS)}}).encode())
    with pytest.raises(ApplicationError) as got:
        DATA_CONVERTER.payload_converter.from_payloads([raw], [Pause])
    assert got.value.type == INVALID_PAYLOAD
    assert len(got.value.message) < MAX_PROBLEMS * (MAX_PROBLEM_CHARS + 2) and "more problems" in got.value.message


def test_each_listed_problem_is_one_bounded_line_and_a_short_list_is_whole():
    long = "x: " + "y" * 100_000 + "\n- forged line"
    assert all(len(p) <= MAX_PROBLEM_CHARS and "\n" not in p for p in bounded([long] * 3))
    assert bounded(["a", "b"]) == ["a", "b"] and len(bounded(map(str, range(MAX_PROBLEMS)))) == MAX_PROBLEMS
    assert bounded(map(str, range(MAX_PROBLEMS + 1)))[-1] == "… and 2 more problems"
    try:
        Pause.model_validate({"by": "alice", **{f"k{i}": 1 for i in range(1000)}})
    except ValidationError as err:
        one = joined(payload_problems(err, Pause))
    assert one.count("unknown field") == MAX_PROBLEMS - 1 and one.endswith("… and 951 more problems")
