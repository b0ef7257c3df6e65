"""The region guard's look against Debian's Prometheus: requests per step, latency buckets and a day back (the
region's own history) read from a real server, so a region worse than its peers and than its own yesterday is sick
on both counts, judged on every request."""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from activities.adapters.registry import registry_from_targets
from activities.adapters.simulated import FleetScenario, SimulatedFleet
from activities.adapters.targets import parse_targets
from activities.guard import GuardActivities
from activities.guard_models import GuardLookInput, GuardLookResult
from canary.config import MetricSpec
from canary.guard import GuardJudge
from tests.conftest import require_or_skip
from tests.integration import promdata
from tests.workflows.evacuation_helpers import REGIONS, simulated_targets

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

SERVICE, VERSION, DAY = "guarded", "1.0.0", 86_400
SICK = "eu-west-1"
LABELS = 'service="{service}",region="{region}",env="{environment}",role="{role}",version="{version}"'
QUERIES = {
    "latency_p99": promdata.LATENCY_P99,
    "error_rate": promdata.ERROR_RATE,
    "requests": f"sum(increase(http_requests_total{{{LABELS}}}[1m]))",
}
BUCKETS = f"sum by (le) (increase(http_request_duration_seconds_bucket{{{LABELS}}}[{{step}}]))"


@dataclasses.dataclass
class Server:
    url: str
    now: int


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Every region's primary now (eu-west-1 regressed) and the same hour a day back (all healthy)."""
    if any(shutil.which(b) is None for b in ("prometheus", "promtool")):
        require_or_skip("Prometheus", "prometheus or promtool not on PATH (apt-get install prometheus)")
    now = int(time.time())
    sets = []
    for r in REGIONS:
        profile = promdata.REGRESSED if r == SICK else promdata.HEALTHY
        sets.append(promdata.SeriesSet(SERVICE, r, "prod", "primary", VERSION, profile, now - 3600, now + 600))
        sets.append(promdata.SeriesSet(SERVICE, r, "prod", "primary", VERSION, promdata.HEALTHY, now - DAY - 3600,
                                       now - DAY + 600))
    proc = promdata.PrometheusProcess(tmp_path_factory.mktemp("guard-prometheus"), sets).start()
    try:
        yield Server(proc.url, now)
    finally:
        proc.stop()


def registry(url: str) -> Any:
    data = simulated_targets()
    data["defaults"]["metrics"] = {"kind": "prometheus", "url": url, "queries": QUERIES,
                                   "histograms": {"latency_p99": {"query": BUCKETS}}}
    return registry_from_targets(parse_targets(data), SimulatedFleet(FleetScenario()))


async def test_a_region_worse_than_its_peers_and_its_own_yesterday_is_sick_on_every_request(
        prometheus: Server) -> None:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, current_attempt_scheduled_time=datetime.fromtimestamp(prometheus.now, UTC))
    inp = GuardLookInput(service=SERVICE, look=1, window_seconds=1800, sample_interval_seconds=60,
                         judge=GuardJudge(history_days=2, min_samples=5), readiness=False, steps=[0],
                         metrics=[MetricSpec(name="latency_p99", kind="latency", allowed_increase=1.2),
                                  MetricSpec(name="error_rate", kind="error_rate", allowed_increase=1.5)])
    result: GuardLookResult = await env.run(GuardActivities(registry(prometheus.url)).guard_look, inp)
    looks = {x.region: x for x in result.looks}
    sick = looks[SICK]
    assert sick.unhealthy and sick.degraded, sick.summary
    latency = next(r for r in sick.reasons if r.startswith("vs peers") and "latency_p99" in r)
    assert "buckets of" in latency and "and its own history (latency_p99" in latency  # a day back, from Prometheus
    assert sick.requests is not None and 50_000 < sick.requests < 150_000  # 50 rps for 31 steps of a minute
    for r in REGIONS:
        if r != SICK:
            assert not looks[r].unhealthy and not looks[r].no_data, looks[r].summary
