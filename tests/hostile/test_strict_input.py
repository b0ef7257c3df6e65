"""Strict input wherever a person types (issue #17 item 6): no duplicate keys, no coercion, bounded workflow inputs,
unique report keys."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from temporalio.api.common.v1 import Payload
from temporalio.exceptions import ApplicationError

from activities.adapters.reports import report_key
from activities.adapters.targets import TargetsError, load_targets
from activities.models import ReportInput
from common.lock import LockState
from workflows.evacuation.settings import EvacuationInput
from workflows.request import RequestError, RolloutRequest, load_request
from workflows.rollout.updates import Approve, Pause
from workflows.stage.models import StageInput

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy/examples/request.yaml"


def example() -> dict[str, Any]:
    data = yaml.safe_load(EXAMPLE.read_text())
    assert isinstance(data, dict)
    return data


def refused(path: Path, *words: str) -> str:
    with pytest.raises(RequestError) as err:
        load_request(path)
    text = str(err.value)
    for w in words:
        assert w in text, text
    return text


# -- duplicate keys ---------------------------------------------------------------------------------------------------
def test_a_yaml_request_naming_a_key_twice_is_refused_with_the_key_and_both_lines(tmp_path: Path):
    text = EXAMPLE.read_text()
    first = text.splitlines().index(next(line for line in text.splitlines() if line.startswith("service:"))) + 1
    path = tmp_path / "r.yaml"
    path.write_text(text + "service: payments-evil\n")
    last = len(path.read_text().splitlines())
    refused(path, "duplicate key 'service'", f"line {first} and line {last}")


def test_a_nested_duplicate_in_yaml_and_json_is_refused_too(tmp_path: Path):
    path = tmp_path / "r.yaml"
    path.write_text("service: a\ncanary:\n  analysis_minutes: 5\n  metrics: []\n  analysis_minutes: 500\n")
    refused(path, "duplicate key 'analysis_minutes' on line 3 and line 5")
    path = tmp_path / "r.json"
    path.write_text('{"service": "a",\n "canary": {"analysis_minutes": 5,\n  "metrics": [{"service": 1}],\n'
                    '  "analysis_minutes": 500}}')
    refused(path, "duplicate key 'analysis_minutes' on line 2 and line 4")


def test_a_targets_file_naming_a_key_twice_is_refused(tmp_path: Path):
    path = tmp_path / "t.yaml"
    path.write_text("targets: []\nreports: {kind: local}\ntargets: []\n")
    with pytest.raises(TargetsError, match="duplicate key 'targets' on line 1 and line 3"):
        load_targets(path)


def test_merge_keys_may_still_override_what_they_merge():
    from common.loading import parse_yaml

    assert parse_yaml("b: &b {k: 1}\nc:\n  <<: *b\n  k: 2\n") == {"b": {"k": 1}, "c": {"k": 2}}


# -- no coercion where a person types -------------------------------------------------------------------------------
@pytest.mark.parametrize(("change", "field"), [
    (lambda d: d["canary"].__setitem__("analysis_minutes", True), "canary.analysis_minutes"),
    (lambda d: d["canary"].__setitem__("interval_seconds", "60"), "canary.interval_seconds"),
    (lambda d: d["soak"].__setitem__("prod_hours", "4"), "soak.prod_hours"),
    (lambda d: d["canary"]["metrics"][0].__setitem__("allowed_increase", "1.2"), "canary.metrics"),
    (lambda d: d["approvals"].__setitem__("timeout_hours", True) if "approvals" in d
     else d.__setitem__("approvals", {"timeout_hours": True}), "approvals.timeout_hours"),
])
def test_values_of_the_wrong_type_are_refused_not_coerced(tmp_path: Path, change: Any, field: str):
    data = example()
    change(data)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    refused(path, field)


def test_a_binary_service_is_refused(tmp_path: Path):
    path = tmp_path / "r.yaml"
    service = example()["service"]
    encoded = __import__("base64").b64encode(service.encode()).decode()
    path.write_text(EXAMPLE.read_text().replace(f"service: {service}\n", f"service: !!binary {encoded}\n", 1))
    assert yaml.safe_load(path.read_text())["service"] == service.encode()  # the file does say it, as bytes
    refused(path, "service: Input should be a valid string")


def test_freeze_dates_written_as_json_strings_or_yaml_dates_still_work(tmp_path: Path):
    data = example()
    data["regions"][0]["freeze_dates"] = ["2026-12-24"]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    assert str(load_request(path).regions[0].freeze_dates[0]) == "2026-12-24"
    data["regions"][0]["freeze_dates"] = [20261224]
    path.write_text(json.dumps(data))
    refused(path, "freeze_dates")
    # and the request as it travels (JSON, dates and times as strings) validates again, strictly
    req = load_request(EXAMPLE)
    assert RolloutRequest.model_validate_json(req.model_dump_json()) == req


def _decode(payload: dict[str, Any], model: type) -> Any:
    """What the worker does with a JSON payload typed into the UI (the converter every worker uses)."""
    from worker.converter import DATA_CONVERTER

    raw = Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(payload).encode())
    return DATA_CONVERTER.payload_converter.from_payloads([raw], [model])[0]


@pytest.mark.parametrize(("model", "payload", "field"), [
    (Approve, {"wave": True, "approver": "alice"}, "wave"),
    (Approve, {"wave": "1", "approver": "alice"}, "wave"),
    (Approve, {"wave": 1.0, "approver": "alice"}, "wave"),
    (Pause, {"by": 7}, "by"),
])
def test_an_update_payload_of_the_wrong_type_is_refused(model: type, payload: dict[str, Any], field: str):
    with pytest.raises(ApplicationError) as err:
        _decode(payload, model)
    assert err.value.type == "InvalidPayload" and field in err.value.message and "\n" not in err.value.message
    assert _decode({"wave": 1, "approver": "alice"}, Approve).wave == 1  # the right type still works


# -- every workflow's input: the CLI's bounds, whatever started it ---------------------------------------------------
def _stage_input() -> dict[str, Any]:
    req = load_request(EXAMPLE)
    return {"rollout_id": req.workflow_id, "service": req.service, "version": req.version, "image": req.image,
            "region": req.regions[0].name, "environment": "prod", "canary": req.canary.model_dump(mode="json"),
            "soak_hours": 1.0}


def _report_input() -> dict[str, Any]:
    return {"stage": {"service": "a", "region": "b", "environment": "prod"}, "rollout_id": "rollout/a/1",
            "analysis_id": "x", "metrics": [{"name": "latency"}], "judge": {},
            "window": {"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T01:00:00Z"}, "baseline_version": "1",
            "canary_version": "2"}


EVAC = {"service": "payments", "region": "eu-west-1", "requested_by": "alice"}


@pytest.mark.parametrize(("model", "payload", "field"), [
    (EvacuationInput, {**EVAC, "extra_wait_seconds": 1e12}, "extra_wait_seconds"),
    (EvacuationInput, {**EVAC, "extra_wait_seconds": 10**12}, "extra_wait_seconds"),
    (EvacuationInput, {**EVAC, "approval_timeout_minutes": 1e308}, "approval_timeout_minutes"),
    (EvacuationInput, {**EVAC, "health_interval_seconds": 10**9}, "health_interval_seconds"),
    (EvacuationInput, {**EVAC, "health_baseline_minutes": 1e9}, "health_baseline_minutes"),
    (EvacuationInput, {**EVAC, "prewarm": "false"}, "prewarm"),
    (EvacuationInput, {**EVAC, "reason": "x" * 5000}, "reason"),
    (StageInput, {**_stage_input(), "soak_hours": 1e9}, "soak_hours"),
    (StageInput, {**_stage_input(), "wave": True}, "wave"),
    (StageInput, {**_stage_input(), "history_budget": 10**9}, "history_budget"),
    (LockState, {"service": "a", "holder_check_seconds": 1e308}, "holder_check_seconds"),
    (LockState, {"service": "a", "holder": {"workflow_id": "w", "service": "a", "version": 1}}, "holder.version"),
    (ReportInput, {**_report_input(), "metrics": [{"name": f"m{i}"} for i in range(51)]}, "metrics"),
    (ReportInput, {**_report_input(), "analysis_id": "x" * 300}, "analysis_id"),
])
def test_a_workflow_input_out_of_bounds_or_of_the_wrong_type_is_refused_naming_the_field(
        model: type, payload: dict[str, Any], field: str):
    with pytest.raises(ApplicationError) as err:
        _decode(payload, model)
    assert err.value.type == "InvalidPayload" and field in err.value.message, err.value.message
    assert "\n" not in err.value.message and "Traceback" not in err.value.message


def test_the_valid_inputs_above_decode():
    assert _decode(EVAC, EvacuationInput).service == "payments"
    assert _decode(_stage_input(), StageInput).soak_hours == 1.0
    assert _decode({"service": "a"}, LockState).service == "a"
    assert _decode(_report_input(), ReportInput).analysis_id == "x"


# -- report keys ------------------------------------------------------------------------------------------------------
def test_a_trailing_dot_no_longer_shares_a_report_key():
    assert report_key("rollout/a/1.0.0.", "x") != report_key("rollout/a/1.0.0", "x")
    assert report_key("rollout/a/1.0.0+b", "x") != report_key("rollout/a/1.0.0_b", "x")
    assert report_key("rollout/checkout/2.0.0", "eu-west-1-prod-canary") == \
        "rollout_checkout_2.0.0/eu-west-1-prod-canary.html"  # ordinary ids read as before


ids = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=30)


@given(a=st.tuples(ids, ids), b=st.tuples(ids, ids))
def test_report_keys_are_unique_and_safe_path_segments(a: tuple[str, str], b: tuple[str, str]):
    ka, kb = report_key(*a), report_key(*b)
    assert (ka == kb) == (a == b)
    segments = ka.split("/")
    assert len(segments) == 2 and all(s and not s.startswith(".") and s not in ("..",) for s in segments)
