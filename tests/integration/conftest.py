"""Real servers for the adapter tests: Prometheus (Debian package), moto in server mode, the fake kube API.

A missing component skips its tests on a laptop; with BIFROST_REQUIRE_INTEGRATION=1 (CI) it fails them.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tests.conftest import require_or_skip
from tests.fakes.kube_api import FakeKubeApi
from tests.integration import promdata

# One analysis history for all Prometheus tests: 2 h back and 8 h ahead of now, so time-skipped
# workflows (whose clock runs ahead of the wall clock) find data in their windows too.
SERVICE = "checkout"
BASELINE, GOOD, BAD, PARTIAL, IDLE = "1.0.0", "1.1.0", "2.0.0", "1.2.0", "1.3.0"
PROD_ONLY_BAD = "3.0.0"  # healthy in test environments, regressed in prod
PROM_REGIONS = [("us-east-1", "test"), ("us-east-1", "prod"), ("eu-west-1", "prod")]


def prometheus_sets(now: int) -> list[promdata.SeriesSet]:
    start, end = now - 2 * 3600, now + 8 * 3600
    sets = []
    for region, env in PROM_REGIONS:
        for role, version, profile in (
            ("baseline", BASELINE, promdata.HEALTHY),
            ("canary", GOOD, promdata.HEALTHY),
            ("canary", BAD, promdata.REGRESSED),
            ("primary", BASELINE, promdata.HEALTHY),
            ("canary", PROD_ONLY_BAD, promdata.REGRESSED if env == "prod" else promdata.HEALTHY),
        ):
            sets.append(promdata.SeriesSet(SERVICE, region, env, role, version, profile, start, end))
    # Only for the adapter tests in us-east-1/prod: data for the second half of the past hour, and no traffic.
    sets.append(promdata.SeriesSet(SERVICE, "us-east-1", "prod", "canary", PARTIAL, promdata.HEALTHY, now - 1800, end))
    sets.append(promdata.SeriesSet(SERVICE, "us-east-1", "prod", "canary", IDLE, promdata.HEALTHY, start, end, idle=True))
    return sets


@dataclass
class PrometheusServer:
    url: str
    now: int  # the wall-clock second the synthetic history was generated around


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    """Debian's Prometheus on a free loopback port, backfilled with the synthetic history above."""
    missing = [b for b in ("prometheus", "promtool") if shutil.which(b) is None]
    if missing:
        require_or_skip("Prometheus", f"{', '.join(missing)} not on PATH (apt-get install prometheus)")
    now = int(time.time())
    proc = promdata.PrometheusProcess(tmp_path_factory.mktemp("prometheus"), prometheus_sets(now)).start()
    try:
        yield PrometheusServer(proc.url, now)
    finally:
        proc.stop()


class Front:
    """A real HTTP front for Prometheus that fails the first `failures` requests and records headers."""

    def __init__(self, target: str, failures: int = 0, status: int = 503, hang: bool = False,
                 echo_credential: bool = False) -> None:
        self.target, self.failures, self.status, self.hang = target, failures, status, hang
        self.echo_credential = echo_credential  # a failure's body quotes the Authorization value, "Basic " cut off
        self.seen: list[dict[str, str]] = []
        self.release = threading.Event()
        front = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                front.seen.append(dict(self.headers))
                if front.hang:
                    front.release.wait(30)
                    return
                if front.failures > 0:
                    front.failures -= 1
                    code, data = front.status, b'{"status":"error","errorType":"unavailable","error":"overloaded"}'
                    if front.echo_credential:
                        sent = (self.headers.get("Authorization") or "").split(" ")[-1]
                        data = json.dumps({"status": "error", "errorType": "unauthorized",
                                           "error": f"credential {sent} is not allowed"}).encode()
                else:
                    resp = httpx.post(front.target + self.path, content=body,
                                      headers={"Content-Type": self.headers["Content-Type"]})
                    code, data = resp.status_code, resp.content
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@dataclass
class MotoServer:
    endpoint: str

    def client(self, service: str, region: str = "us-east-1") -> Any:
        import boto3

        return boto3.client(service, endpoint_url=self.endpoint, region_name=region,
                            aws_access_key_id="testing", aws_secret_access_key="testing")


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """moto in server mode (HTTP, in a thread) on a free loopback port; tests use unique names instead of resets."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as err:
        require_or_skip("moto server", f"{err} (pip install 'moto[server]')")
    logging.getLogger("werkzeug").setLevel(logging.CRITICAL)  # moto logs every request and its own 500s
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield MotoServer(f"http://{host}:{port}")
    finally:
        server.stop()


@pytest.fixture
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dummy credentials for moto, so boto3's default chain never reaches for real ones."""
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture
def kube() -> Iterator[FakeKubeApi]:
    """A fresh fake apps/v1 API server per test (starts in milliseconds)."""
    with FakeKubeApi(tick_seconds=0.02) as fake:
        yield fake


@dataclass
class Receiver:
    """A local HTTP endpoint recording what webhooks post to it; `statuses` scripts its answers."""

    url: str
    posts: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)  # answers for the next requests; then 200
    hang: threading.Event | None = None  # when set: do not answer until the event is set


@pytest.fixture
def webhook_receiver() -> Iterator[Receiver]:
    receiver = Receiver(url="")
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            receiver.posts.append((self.path, json.loads(body or b"{}")))
            if receiver.hang is not None:
                release.wait(30)
            status = receiver.statuses.pop(0) if receiver.statuses else 200
            payload = b"ok" if status < 300 else b"invalid_token"
            self.send_response(status)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield receiver
    finally:
        release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)



def assert_one_line(text: str, *parts: str) -> None:
    """An adapter message fit for a result, the UI or a chat message: one line, no client dump, naming every part."""
    assert "\n" not in text and "\r" not in text, text
    for dump in ("HTTP response headers", "HTTPHeaderDict", "Traceback", "object at 0x"):
        assert dump not in text, text
    for part in parts:
        assert part in text, f"{part!r} not in {text!r}"
