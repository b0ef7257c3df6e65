"""A fault-injecting HTTP proxy in front of moto's Route 53, for tests: 500s, throttling, slow answers, outages.

Every ChangeResourceRecordSets batch that reaches moto is recorded with the weights it sets and the weights
its DELETEs name, so a test can tell which batches Route 53 itself would have refused (a DELETE must name
the record exactly as it is; moto does not check that).
"""

from __future__ import annotations

import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

R53 = "{https://route53.amazonaws.com/doc/2013-04-01/}"
ERROR = ('<?xml version="1.0"?><ErrorResponse xmlns="https://route53.amazonaws.com/doc/2013-04-01/"><Error>'
         '<Type>{kind}</Type><Code>{code}</Code><Message>{message}</Message></Error><RequestId>fault</RequestId>'
         '</ErrorResponse>')


@dataclass
class Fault:
    """What to do to the next `count` matching requests: `500`, `throttle`, `slow` (answer after `delay` s) or `down`."""

    kind: str
    count: int = 1
    only_changes: bool = True  # only ChangeResourceRecordSets batches, else every request
    delay: float = 0.0
    skip: int = 0  # let this many matching requests through first


@dataclass
class Batch:
    """One change batch that reached moto: the weights it sets and the weights its DELETEs expect."""

    sets: dict[str, int]
    expects: dict[str, int]
    before: dict[str, int] = field(default_factory=dict)

    @property
    def stale(self) -> bool:
        """Route 53 would refuse it: a DELETE names a weight the record no longer had when it arrived."""
        return any(self.before.get(k) != w for k, w in self.expects.items())


class FaultyRoute53:
    """The proxy: forwards to moto, except for the faults queued with `inject`."""

    def __init__(self, target: str, read_weights: "callable[[], dict[str, int]]") -> None:  # type: ignore[valid-type]
        self.target = target
        self.read_weights = read_weights
        self.faults: list[Fault] = []
        self.batches: list[Batch] = []
        self.injected: list[str] = []
        self.holding = threading.Event()  # set while a slow answer is being held back
        self._lock = threading.Lock()
        self._changes = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                change = self.command == "POST" and self.path.rstrip("/").endswith("/rrset")
                fault = proxy._take(change)
                if fault is not None and fault.kind == "down":
                    self.close_connection = True
                    self.connection.close()  # no answer at all: the endpoint is unreachable
                    return
                if fault is not None and fault.kind in ("500", "throttle"):
                    code, status, kind = (("InternalFailure", 500, "Receiver") if fault.kind == "500"
                                          else ("Throttling", 400, "Sender"))
                    self._answer(status, ERROR.format(kind=kind, code=code, message=f"injected {code}").encode(),
                                 {"Content-Type": "text/xml"})
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                if change:
                    with proxy._changes:  # Route 53 applies one change batch at a time
                        proxy.batches.append(_batch(body, proxy.read_weights()))
                        resp = httpx.request(self.command, proxy.target + self.path, content=body, headers=headers)
                else:
                    resp = httpx.request(self.command, proxy.target + self.path, content=body, headers=headers)
                if fault is not None and fault.kind == "slow":
                    proxy.holding.set()
                    time.sleep(fault.delay)  # applied at once, answered late: the client gives up first
                self._answer(resp.status_code, resp.content, dict(resp.headers))

            def _answer(self, status: int, content: bytes, headers: dict[str, str]) -> None:
                try:
                    self.send_response(status)
                    for k, v in headers.items():
                        if k.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                            self.send_header(k, v)
                    self.send_header("Content-Length", str(len(content)))
                    self.end_headers()
                    self.wfile.write(content)
                except OSError:
                    pass  # the client gave up on a slow answer

            do_GET = do_POST = do_DELETE = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def inject(self, *faults: Fault) -> None:
        with self._lock:
            self.faults.extend(faults)

    def _take(self, change: bool) -> Fault | None:
        with self._lock:
            for f in self.faults:
                if f.count > 0 and (change or not f.only_changes):
                    if f.skip > 0:
                        f.skip -= 1
                        continue
                    f.count -= 1
                    self.injected.append(f.kind)
                    if f.count == 0:
                        self.faults.remove(f)
                    return f
        return None

    @property
    def applied(self) -> list[dict[str, int]]:
        """The weights each batch that Route 53 would have accepted set, in the order they landed."""
        return [b.sets for b in self.batches if not b.stale]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _batch(body: bytes, before: dict[str, int]) -> Batch:
    root = ET.fromstring(body)
    sets, expects = {}, {}
    for change in root.iter(f"{R53}Change"):
        action = change.findtext(f"{R53}Action")
        rrs = change.find(f"{R53}ResourceRecordSet")
        if rrs is None:
            continue
        sid, weight = rrs.findtext(f"{R53}SetIdentifier"), rrs.findtext(f"{R53}Weight")
        if sid is None or weight is None:
            continue
        (expects if action == "DELETE" else sets)[sid] = int(weight)
    return Batch(sets=sets, expects=expects, before=before)
