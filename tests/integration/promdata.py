"""Synthetic request metrics for Prometheus, backfilled with promtool, and a Prometheus process on a free port.

Each series set is one (service, region, env, role, version) with its own latency and error profile;
per-step noise is seeded, so every run sees the same data. Counters are cumulative like a real exporter's.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

BUCKETS = [0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0]
STEP_SECONDS = 60

LATENCY_P99 = (
    'histogram_quantile(0.99, sum by (le) (rate(http_request_duration_seconds_bucket{service="{service}",'
    'region="{region}",env="{environment}",role="{role}",version="{version}"}[3m])))'
)
ERROR_RATE = (
    'sum(rate(http_requests_total{service="{service}",region="{region}",env="{environment}",role="{role}",'
    'version="{version}",code=~"5.."}[3m])) / sum(rate(http_requests_total{service="{service}",region="{region}",'
    'env="{environment}",role="{role}",version="{version}"}[3m]))'
)
QUERIES = {"latency_p99": LATENCY_P99, "error_rate": ERROR_RATE}


@dataclass(frozen=True)
class Profile:
    """How one version behaves: request rate, error fraction, median latency and spread (log-normal)."""

    rps: float = 50.0
    error_rate: float = 0.01
    median_s: float = 0.08
    sigma: float = 0.5
    noise: float = 0.1  # relative per-step jitter of rate, errors and median


HEALTHY = Profile()
REGRESSED = Profile(error_rate=0.05, median_s=0.16)


@dataclass(frozen=True)
class SeriesSet:
    service: str
    region: str
    env: str
    role: str
    version: str
    profile: Profile
    start: int  # unix seconds
    end: int
    idle: bool = False  # no requests at all: counters stay flat, ratios are NaN


def _cdf(le: float, median: float, sigma: float) -> float:
    return 0.5 * (1 + math.erf((math.log(le) - math.log(median)) / (sigma * math.sqrt(2))))


def openmetrics(sets: list[SeriesSet]) -> str:
    """OpenMetrics text with both families contiguous, timestamps in seconds, ending in # EOF."""
    hist: list[str] = []
    reqs: list[str] = []
    for s in sets:
        rng = random.Random(f"{s.service}|{s.region}|{s.env}|{s.role}|{s.version}")
        base = f'service="{s.service}",region="{s.region}",env="{s.env}",role="{s.role}",version="{s.version}"'
        count = errors = total_latency = 0.0
        buckets = [0.0] * len(BUCKETS)
        t = s.start
        while t <= s.end:
            p = s.profile
            if not s.idle:
                n = p.rps * STEP_SECONDS * (1 + rng.uniform(-p.noise, p.noise))
                median = p.median_s * (1 + rng.uniform(-p.noise, p.noise))
                count += n
                errors += n * p.error_rate * (1 + rng.uniform(-p.noise, p.noise))
                total_latency += n * median
                for b, le in enumerate(BUCKETS):
                    buckets[b] += n * _cdf(le, median, p.sigma)
            for b, le in enumerate(BUCKETS):
                hist.append(f'http_request_duration_seconds_bucket{{{base},le="{le}"}} {buckets[b]:.4f} {t}')
            hist.append(f'http_request_duration_seconds_bucket{{{base},le="+Inf"}} {count:.4f} {t}')
            hist.append(f"http_request_duration_seconds_sum{{{base}}} {total_latency:.4f} {t}")
            hist.append(f"http_request_duration_seconds_count{{{base}}} {count:.4f} {t}")
            reqs.append(f'http_requests_total{{{base},code="200"}} {count - errors:.4f} {t}')
            reqs.append(f'http_requests_total{{{base},code="500"}} {errors:.4f} {t}')
            t += STEP_SECONDS
    # OpenMetrics wants every series' samples in time order and each family contiguous; sort within family by series.
    hist.sort(key=lambda line: (line.rsplit(" ", 2)[0], int(line.rsplit(" ", 1)[1])))
    reqs.sort(key=lambda line: (line.rsplit(" ", 2)[0], int(line.rsplit(" ", 1)[1])))
    return "\n".join(
        ["# TYPE http_request_duration_seconds histogram", *hist, "# TYPE http_requests counter", *reqs, "# EOF"]
    ) + "\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrometheusProcess:
    """Backfill `sets` into a fresh TSDB under `workdir` and run Prometheus on a free loopback port.

    With `scrape` (host:port targets), it also scrapes their /metrics every `scrape_interval` (live data)."""

    def __init__(self, workdir: Path, sets: list[SeriesSet], *, scrape: list[str] | None = None,
                 scrape_interval: str = "15s") -> None:
        self.workdir = workdir
        self.sets = sets
        self.scrape = scrape or []
        self.scrape_interval = scrape_interval
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self, ready_timeout: float = 20.0) -> "PrometheusProcess":
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        if self.sets:
            om = self.workdir / "synthetic.om"
            om.write_text(openmetrics(self.sets))
            out = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)],
                                 capture_output=True, text=True, timeout=120)
            if out.returncode != 0:
                raise RuntimeError(f"promtool backfill failed: {out.stderr[-2000:]}")
        config = self.workdir / "prometheus.yml"
        scrape = (f"  - job_name: bifrost\n    static_configs:\n      - targets: {json.dumps(self.scrape)}\n"
                  if self.scrape else "")
        config.write_text(f"global:\n  scrape_interval: {self.scrape_interval}\n  evaluation_interval: {self.scrape_interval}\n"
                          f"scrape_configs:{' []' if not scrape else ''}\n{scrape}")
        log = open(self.workdir / "prometheus.log", "wb")  # noqa: SIM115 - owned by the child
        for _ in range(3):  # a free port can be taken between probing and binding by a concurrent test run
            port = free_port()
            self.proc = subprocess.Popen(
                [shutil.which("prometheus") or "prometheus", f"--config.file={config}", f"--storage.tsdb.path={data}",
                 "--storage.tsdb.retention.time=3650d", f"--web.listen-address=127.0.0.1:{port}"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
            self.url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + ready_timeout
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    if httpx.get(f"{self.url}/-/ready", timeout=0.5).status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
            self.stop()
        tail = (self.workdir / "prometheus.log").read_text()[-2000:]
        raise RuntimeError(f"Prometheus did not become ready:\n{tail}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
