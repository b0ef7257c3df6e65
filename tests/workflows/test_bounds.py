"""Requests at the edge of every bound plan, and the largest run to the end on a time-skipping dev server.

The bounds (docs/request.md) exist so that every duration becomes a timer and every name a Kubernetes name
and a Temporal id; these tests show the extremes are usable, not just refused one step beyond.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest

from bifrost_cli.ops import outcome
from common.traffic.models import MAX_SERVICE_LEN
from tests.workflows.helpers import METRICS, fleet, running_worker, start
from workflows.plan import build_plan
from workflows.request import (
    MAX_ANALYSIS_MINUTES,
    MAX_APPROVAL_HOURS,
    MAX_LOOKS,
    MAX_SOAK_HOURS,
    MIN_LOOK_MINUTES,
    RolloutRequest,
    parse_request,
)


def _request(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "service": "s" * (MAX_SERVICE_LEN - 8) + uuid.uuid4().hex[:8],  # one lock per test
        "version": "1." + "9" * 126,  # 128 characters
        "requested_by": "r" * 200,
        "regions": [{"name": "r" * 63, "traffic_share": 1.0, "environments": ["prod"]}],
        "canary": {"metrics": METRICS, "judge": {"min_samples": 30}},
        "soak": {"test_hours": 0, "prod_hours": 0},
        "approvals": {"timeout_hours": MAX_APPROVAL_HOURS},
        "change": {"description": "d" * 2000},
    }
    for key, value in overrides.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) and isinstance(data.get(key), dict) else value
    return data


def at_the_bounds() -> RolloutRequest:
    """The longest names, the longest analysis the sample limit allows, the longest soak with few looks, the
    longest approval timeout."""
    return parse_request(_request(
        canary={"analysis_minutes": MAX_ANALYSIS_MINUTES, "interval_seconds": 8, "soak_check_minutes": 1440},
        soak={"prod_hours": MAX_SOAK_HOURS},
    ))


BOUNDS = {
    "max analysis at the sample limit": {"canary": {"analysis_minutes": MAX_ANALYSIS_MINUTES, "interval_seconds": 8}},
    "max soak, one look a day": {"soak": {"prod_hours": MAX_SOAK_HOURS}, "canary": {"soak_check_minutes": 1440}},
    "max soak, the most looks": {"soak": {"prod_hours": MAX_SOAK_HOURS},
                                 "canary": {"soak_check_minutes": MAX_SOAK_HOURS * 60 / MAX_LOOKS}},
    "min look interval, the most looks": {"soak": {"prod_hours": MAX_LOOKS * MIN_LOOK_MINUTES / 60},
                                          "canary": {"soak_check_minutes": MIN_LOOK_MINUTES}},
    "look interval equal to the soak": {"soak": {"prod_hours": 0.5}, "canary": {"soak_check_minutes": 30}},
    "max approval timeout with a gate": {"approvals": {"timeout_hours": MAX_APPROVAL_HOURS, "gates": [{"wave": 1}]}},
    "max replicas": {"canary": {"canary_replicas": 1000, "baseline_replicas": 1000}},
    "most regions and widest waves": {
        "regions": [{"name": f"region-{i}", "traffic_share": 1 / 64} for i in range(64)],
        "blast_radius": {"max_parallel_regions": 64, "max_parallel_prod_regions": 64, "prod_traffic_caps": [1.0] * 64},
    },
    "most metrics": {"canary": {"metrics": [{"name": "m" * 90 + f"{i:02d}"} for i in range(50)]}},
    "demo's compressed time": {"canary": {"analysis_minutes": 0.05, "soak_check_minutes": 0.05},
                               "soak": {"prod_hours": 0.002}},
}


@pytest.mark.parametrize("overrides", list(BOUNDS.values()), ids=list(BOUNDS))
def test_a_request_at_each_bound_plans(overrides):
    assert 1440 * 60 / 8 <= 11_000  # "max analysis at the sample limit" is within Prometheus' limit
    data = _request(**{k: v for k, v in overrides.items() if k != "canary"})
    data["canary"] = {**data["canary"], **overrides.get("canary", {})}
    plan = build_plan(parse_request(data))
    assert plan.waves and all(w.stages for w in plan.waves)


def test_one_step_beyond_the_look_limit_is_refused():
    from workflows.request import RequestError

    data = _request(soak={"prod_hours": MAX_SOAK_HOURS}, canary={"soak_check_minutes": MAX_SOAK_HOURS * 60 / (MAX_LOOKS + 1)})
    with pytest.raises(RequestError, match="more than 20160"):
        parse_request(data)


async def test_the_largest_request_runs_to_success(ts_env, task_queue, tmp_path):
    """24 h of analysis and a 14-day soak with a look a day: every duration is a timer the server can hold."""
    req = at_the_bounds()
    f = fleet()
    async with running_worker(ts_env.client, f, task_queue, tmp_path):
        result = await outcome(await start(ts_env.client, req, task_queue))
    assert result.status == "succeeded", result.reason
    (stage,) = result.stages
    assert stage.soak_looks == 14 and stage.version_now == req.version
    assert stage.ended_at - stage.started_at >= timedelta(hours=24 + MAX_SOAK_HOURS)


async def test_the_longest_approval_timeout_is_a_timer(ts_env, task_queue, tmp_path):
    req = parse_request(_request(approvals={"timeout_hours": MAX_APPROVAL_HOURS, "gates": [{"wave": 1}]}))
    async with running_worker(ts_env.client, fleet(), task_queue, tmp_path):
        result = await outcome(await start(ts_env.client, req, task_queue))
    assert result.status == "rejected" and "timed out after 720 h" in result.reason
    timeout = next(a for a in result.audit if a.action == "approval-timeout")
    granted = next(a for a in result.audit if a.action == "lock-granted")
    assert timeout.at - granted.at >= timedelta(hours=MAX_APPROVAL_HOURS)


def test_every_traffic_change_input_takes_the_same_headroom_and_health_interval_bounds_with_its_own_default() -> None:
    from pydantic import BaseModel, ValidationError

    from workflows.evacuation.settings import EvacuationInput
    from workflows.guard.models import GuardEvacuation
    from workflows.request import EvacuationSettings
    from workflows.revert.models import RevertInput

    base = {"service": "pay", "requested_by": "al"}
    cases: list[tuple[type[BaseModel], dict[str, Any], str, object]] = [
        (EvacuationSettings, {}, "health_interval_seconds", 60),  # a production stage's: a minute apart
        (EvacuationInput, {**base, "region": "eu-west-1"}, "health_interval_seconds", 5),  # by hand: seconds apart
        (GuardEvacuation, {}, "health_interval_seconds", 5),  # a guard's and a drill's `evacuation`
        (RevertInput, {**base, "to_version": "1.0.0", "reason": "r"}, "health_interval_seconds", None),
        (EvacuationSettings, {}, "headroom", 1.2),
        (EvacuationInput, {**base, "region": "eu-west-1"}, "headroom", 1.2),
        (GuardEvacuation, {}, "headroom", 1.2),
    ]
    for model, given, name, default in cases:
        assert getattr(model.model_validate(given), name) == default, (model.__name__, name)
        low, high = (1.0, 10.0) if name == "headroom" else (1, 3600)
        model.model_validate({**given, name: high})
        for bad in (high * 2, low / 2 if name == "headroom" else 0):
            with pytest.raises(ValidationError, match=name):
                model.model_validate({**given, name: bad})
