"""CloudWatch alarm states as a region guard input (issue #19 item 1), against moto in server mode: a region whose
alarm is in ALARM is unhealthy at that look whatever its metrics say; an alarm that does not exist is only noted."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from activities.adapters.registry import registry_from_targets
from activities.adapters.simulated import FleetScenario, SimulatedFleet
from activities.adapters.targets import parse_targets
from activities.guard import GuardActivities
from activities.guard_models import GuardLookInput, GuardLookResult
from canary.guard import GuardJudge
from tests.integration.conftest import MotoServer
from tests.workflows.evacuation_helpers import simulated_targets

pytestmark = pytest.mark.asyncio


def _registry(moto: MotoServer, alarms: dict[str, list[str]]) -> Any:
    data = simulated_targets()
    for t in data["targets"]:
        if t["region"] in alarms:
            t["traffic"]["alarms"] = alarms[t["region"]]
    data["aws"] = {"endpoint_url": moto.endpoint, "max_attempts": 2, "timeout_seconds": 5}
    return registry_from_targets(parse_targets(data), SimulatedFleet(FleetScenario(fresh_draws=False, min_samples=120)))


async def _look(registry: Any, service: str, look: int) -> GuardLookResult:
    inp = GuardLookInput(service=service, look=look, window_seconds=60, sample_interval_seconds=1, judge=GuardJudge(),
                         steps=[0], readiness=False)
    result: GuardLookResult = await ActivityEnvironment().run(GuardActivities(registry).guard_look, inp)
    return result


async def test_an_alarm_in_alarm_makes_its_region_unhealthy_and_a_missing_one_is_only_noted(
        moto_server: MotoServer, aws_credentials: None) -> None:
    svc = f"pay-{uuid.uuid4().hex[:8]}"
    cw = moto_server.client("cloudwatch", "eu-west-1")
    cw.put_metric_alarm(AlarmName=f"{svc}-5xx", Namespace="Bifrost/Test", MetricName="5xx", Statistic="Sum",
                        Period=60, EvaluationPeriods=1, Threshold=1.0, ComparisonOperator="GreaterThanThreshold")
    cw.set_alarm_state(AlarmName=f"{svc}-5xx", StateValue="ALARM", StateReason="test: 5xx above 1")
    registry = _registry(moto_server, {"eu-west-1": ["{service}-5xx"], "us-east-1": ["{service}-typo"]})

    result = await _look(registry, svc, 1)
    looks = {look.region: look for look in result.looks}
    assert looks["eu-west-1"].unhealthy and looks["eu-west-1"].reasons[0] == f"CloudWatch alarm {svc}-5xx in ALARM"
    assert not looks["us-east-1"].unhealthy and not looks["ap-south-1"].unhealthy  # healthy and equal metrics
    assert f"us-east-1: CloudWatch alarms not found: {svc}-typo (check the targets file)" in result.notes

    cw.set_alarm_state(AlarmName=f"{svc}-5xx", StateValue="OK", StateReason="test: recovered")
    again = {look.region: look for look in (await _look(registry, svc, 2)).looks}
    assert not again["eu-west-1"].unhealthy


async def test_a_region_without_alarms_reads_none(moto_server: MotoServer, aws_credentials: None) -> None:
    registry = _registry(moto_server, {})
    assert all(t.alarms is None for t in registry.traffic_targets.values())
    result = await _look(registry, f"pay-{uuid.uuid4().hex[:8]}", 1)
    assert not any(look.unhealthy for look in result.looks) and not result.notes
