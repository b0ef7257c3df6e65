"""The evacuation's page (the UI's current details): a pure function of its state."""

from __future__ import annotations

from canary.config import MetricResult
from workflows.evacuation.details import evacuation_details, wait_line
from workflows.evacuation.models import EvacuationState, HealthValue, StepRecord
from workflows.evacuation.settings import EvacuationInput


def _state(direction: str = "evacuate", **health: object) -> EvacuationState:
    inp = EvacuationInput.model_validate({"service": "payments", "region": "eu-west-1", "requested_by": "alice",
                                          "direction": direction, **health})
    state = EvacuationState.of(inp, "traffic/payments")
    state.planned = [{"eu-west-1": 50}, {"eu-west-1": 100}]
    state.record_set = "payments.example.com"
    return state


def test_the_wait_names_the_ttl_and_why_it_waits_longer():
    s = _state(health_interval_seconds=5, judge={"min_samples": 4})
    s.ttl_seconds, s.settle_seconds, s.wait_seconds = 5, 5, 20
    assert wait_line(s) == "wait 20 s after each step (TTL 5 s; longer, so the health check has 4 samples 5 s apart)"
    s.wait_seconds = 5
    s.health.min_samples = 1
    assert wait_line(s) == "wait 5 s after each step (TTL 5 s)"
    s.health.extra_wait_seconds, s.wait_seconds = 10, 15
    assert wait_line(s) == "wait 15 s after each step (TTL 5 s; + 10 s extra)"
    s.settle_seconds, s.wait_seconds, s.health.extra_wait_seconds = 60, 60, 0
    assert wait_line(s) == "wait 60 s after each step (TTL 5 s; the targets' minimum wait 60 s)"
    assert "(TTL)" not in evacuation_details(s)


def test_a_state_recorded_before_the_ttl_was_kept_shows_the_wait_alone():
    s = _state()
    s.wait_seconds = 20
    assert wait_line(s) == "wait 20 s after each step"


def test_a_restore_lists_the_levels_it_walks_in_order():
    s = _state("restore", steps=[67, 33, 0])
    s.levels = [33, 67, 100]
    assert "levels 33%, 67%, 100%;" in evacuation_details(s)


def test_each_health_look_shows_its_values_per_region_and_metric():
    s = _state()
    look = MetricResult(name="latency_p99", classification="Pass", critical=True, baseline_mean=0.2012345,
                        canary_mean=0.21, baseline_n=60, canary_n=58)
    s.steps = [StepRecord(index=1, level=50, weights={"eu-west-1": 50}, healthy=True, health="us-east-1: look 1/2 ok",
                          values=[HealthValue.of("us-east-1", look),
                                  HealthValue(region="ap-south-1", metric="error_rate", classification="Nodata")])]
    details = evacuation_details(s)
    assert "- 1: 50% → {\"eu-west-1\": 50}; health: us-east-1: look 1&#47;2 ok\n" \
           "  - us-east-1 latency\\_p99: 0.2012 → 0.21 (pass, critical; n 60 → 58)\n" \
           "  - ap-south-1 error\\_rate: – → – (NO DATA; n 0 → 0)" in details, details
