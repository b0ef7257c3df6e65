"""One model of a traffic change's settings (TrafficChangeSettings): one set of bounds wherever a traffic change is
asked for, each place with its own defaults; inputs written before it still decode; refusals name the field typed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from common.traffic.settings import MAX_SAMPLES, TrafficChangeSettings
from workflows.drill.models import DrillInput
from workflows.evacuation.models import EvacuationState
from workflows.evacuation.settings import EvacuationInput
from workflows.guard.models import GuardInput
from workflows.request import EvacuationSettings, RequestError, load_request, parse_request

ROOT = Path(__file__).resolve().parents[2]
WHO = {"service": "pay", "requested_by": "al"}


def _settings(model: type[BaseModel], given: dict[str, Any]) -> Any:
    """The embedded settings of a validated input (or the input itself where it extends them)."""
    obj = model.model_validate(given)
    return getattr(obj, "evacuation", obj)


CASES: list[tuple[type[BaseModel], dict[str, Any], str]] = [
    (EvacuationSettings, {}, ""),  # a request's `evacuation`
    (EvacuationInput, {**WHO, "region": "eu-west-1"}, ""),
    (GuardInput, WHO, "evacuation"),
    (DrillInput, {**WHO, "regions": ["eu-west-1"]}, "evacuation"),
]


@pytest.mark.parametrize(("model", "given", "inside"), CASES)
def test_every_traffic_change_takes_the_same_bounds(model: type[BaseModel], given: dict[str, Any], inside: str) -> None:
    def at(values: dict[str, Any]) -> dict[str, Any]:
        return {**given, inside: values} if inside else {**given, **values}

    assert isinstance(_settings(model, given), TrafficChangeSettings)
    for name, ok, bad in [("min_samples", (1, MAX_SAMPLES), (0, MAX_SAMPLES + 1)),
                          ("health_interval_seconds", (1, 3600), (0, 3601)),
                          ("health_check_minutes", (1 / 60, 1440.0), (0, 1441.0)),
                          ("extra_wait_seconds", (0, 86_400), (-1, 86_401)),
                          ("headroom", (1.0, 10.0), (0.5, 11.0))]:
        for value in ok:
            assert getattr(_settings(model, at({name: value})), name) == value
        for value in bad:
            with pytest.raises(ValidationError, match=f"{inside}.{name}" if inside else name):
                model.model_validate(at({name: value}))


def test_each_place_keeps_its_own_defaults() -> None:
    assert (EvacuationSettings().health_interval_seconds, EvacuationSettings().health_check_minutes) == (60, 5.0)
    evacuation = _settings(EvacuationInput, {**WHO, "region": "eu-west-1"})
    assert (evacuation.health_interval_seconds, evacuation.health_check_minutes, evacuation.steps) == (5, 10, [67, 33, 0])
    assert _settings(GuardInput, WHO).steps == _settings(DrillInput, {**WHO, "regions": ["a"]}).steps == [50, 10, 0]


def test_inputs_written_before_still_decode() -> None:
    guard = GuardInput.model_validate({**WHO, "steps": [0], "headroom": 2.0, "evacuation_health_interval_seconds": 1,
                                       "evacuation_min_samples": 1})
    assert guard.evacuation.model_dump(include={"steps", "headroom", "health_interval_seconds", "min_samples"}) == {
        "steps": [0], "headroom": 2.0, "health_interval_seconds": 1, "min_samples": 1}
    drill = DrillInput.model_validate({**WHO, "regions": ["a"], "steps": [50, 0], "health_interval_seconds": 1, "min_samples": 1})
    assert (drill.evacuation.steps, drill.evacuation.min_samples) == ([50, 0], 1)
    old = EvacuationInput.model_validate({**WHO, "region": "a", "health_baseline_minutes": 1,
                                          "judge": {"min_samples": 3, "alpha": 0.01}})
    assert (old.health_check_minutes, old.min_samples, old.judge.min_samples, old.judge.alpha) == (1, 3, 3, 0.01)
    state = EvacuationState.model_validate({"workflow_id": "traffic/pay", "service": "pay", "region": "a", "health": {
        "extra_wait_seconds": 2, "health_baseline_minutes": 1, "health_interval_seconds": 1,
        "judge": {"min_samples": 3, "alpha": 0.01}}})
    assert state.judge is not None and (state.judge.alpha, state.health.min_samples, state.health.extra_wait_seconds) == (0.01, 3, 2)


def test_a_restore_checks_and_judges_as_its_evacuation_did() -> None:
    evacuation = EvacuationInput.model_validate({**WHO, "region": "a", "min_samples": 4, "extra_wait_seconds": 7,
                                                 "judge": {"alpha": 0.02}})
    state = EvacuationState.of(evacuation, "traffic/pay")
    state.weights_before = {"a": 1, "b": 1}
    restore = state.restore_input(requested_by="al")
    assert (restore.min_samples, restore.extra_wait_seconds, restore.judge.alpha, restore.judge.min_samples) == (4, 7, 0.02, 4)


def test_refusals_name_the_field_as_typed() -> None:
    with pytest.raises(ValidationError, match="health_baseline_minutes"):
        EvacuationInput.model_validate({**WHO, "region": "a", "health_baseline_minutes": 1e9})
    with pytest.raises(RequestError, match=r"evacuation\.min_samples"):
        parse_request({"service": "pay", "version": "1.0.0", "evacuation": {"min_samples": 0}})
    assert DrillInput.model_validate({**WHO, "regions": ["a"], "evacuation": {"steps": [1, 2]}}).problems()[0].startswith(
        "evacuation.steps:")


def test_the_stage_evacuates_with_its_requests_settings_and_its_canarys_judge() -> None:
    from canary.config import JudgeConfig

    settings = EvacuationSettings(steps=[50, 0], health_check_minutes=0.5, min_samples=3)
    inp = EvacuationInput.for_stage(settings, JudgeConfig(alpha=0.02), service="pay", region="a", environment="prod",
                                    reason="r")
    assert (inp.steps, inp.health_check_minutes, inp.health_interval_seconds, inp.min_samples, inp.judge.min_samples,
            inp.judge.alpha) == ([50, 0], 1.0, 60, 3, 3, 0.02)


@pytest.mark.parametrize("path", sorted((ROOT / "deploy" / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_the_example_requests_still_load(path: Path) -> None:
    if any(line.startswith("service:") for line in path.read_text().splitlines()):  # a request (top-level service)
        load_request(path)
