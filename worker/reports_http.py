"""`bifrost worker --reports-port`: the reports folder, read-only over HTTP, so the Temporal UI's links open in a browser.

Standard library only (ThreadingHTTPServer in a daemon thread): GET and HEAD of `.html` files under the
folder, nothing else — no listings, no paths outside the folder (`..`, encoded or not, and symlinks out).
A connection that sends nothing for `idle_timeout_seconds` is closed (each holds a thread), and a client
that goes away mid-answer costs one log line, never a traceback.
"""

from __future__ import annotations

import html
import logging
import os
import socket
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

# the reports are self-contained: inline CSS and data: images, nothing to fetch, nothing to run
_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
IDLE_TIMEOUT_SECONDS = 10.0  # a browser sends its request at once; a connection silent this long is dropped

log = logging.getLogger("bifrost.reports_http")


def _handler(root: Path, idle_timeout_seconds: float) -> type[BaseHTTPRequestHandler]:
    class ReportHandler(BaseHTTPRequestHandler):
        server_version = "bifrost-reports"
        sys_version = ""
        timeout = idle_timeout_seconds  # StreamRequestHandler sets it on the socket: every read and write is bounded

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
            pass  # the worker logs JSON; a request log per report view is noise

        def log_error(self, format: str, *args: object) -> None:  # noqa: A002
            """A request that failed before an answer (timed out idle, malformed): one line."""
            log.info("reports HTTP: connection from %s:%s: %s", *self.client_address[:2], format % args)

        def _file(self) -> Path | None:
            """The report file the request names, or None when it names nothing servable."""
            raw = unquote(urlsplit(self.path).path)
            if "\x00" in raw or "\\" in raw:
                return None
            parts = [p for p in raw.split("/") if p]
            if not parts or any(p in (".", "..") or p.startswith(".") for p in parts):
                return None
            path = root.joinpath(*parts)
            try:
                resolved = path.resolve(strict=True)
            except (OSError, RuntimeError):
                return None
            if not resolved.is_relative_to(root) or not resolved.is_file() or resolved.suffix != ".html":
                return None
            return resolved

        def _send(self, head_only: bool) -> None:
            path = self._file()
            if path is None:
                body = (f"<!doctype html><meta charset='utf-8'><title>Not found</title><p>No report at "
                        f"{html.escape(urlsplit(self.path).path)}. A report appears a few seconds after its "
                        "verdict; reload shortly, or check the rollout's status.</p>").encode()
                self._reply(HTTPStatus.NOT_FOUND, body, head_only)
                return
            try:
                body = path.read_bytes()
            except OSError:
                self._reply(HTTPStatus.NOT_FOUND, b"not found", head_only)
                return
            self._reply(HTTPStatus.OK, body, head_only)

        def _reply(self, status: HTTPStatus, body: bytes, head_only: bool) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-cache")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Content-Security-Policy", _CSP)
            self.end_headers()
            if not head_only:
                self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self._send(head_only=False)

        def do_HEAD(self) -> None:  # noqa: N802
            self._send(head_only=True)

        def _refuse(self) -> None:
            self.send_response(HTTPStatus.METHOD_NOT_ALLOWED)
            self.send_header("Allow", "GET, HEAD")
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_POST = do_PUT = do_DELETE = do_PATCH = _refuse  # noqa: N815

    return ReportHandler


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        """One log line per failed connection (a client gone mid-answer, a timeout), never socketserver's traceback."""
        err = sys.exc_info()[1]
        where = ":".join(str(p) for p in client_address) if isinstance(client_address, tuple) else str(client_address)
        if isinstance(err, (TimeoutError, socket.timeout)):
            what = "timed out"
        elif isinstance(err, (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)):
            what = "went away before the answer was sent"
        else:
            what = "failed"
        log.info("reports HTTP: connection from %s %s (%s: %s)", where, what, type(err).__name__, err)


class ReportServer:
    """Serves `root` read-only on host:port in a daemon thread; `url` is where it answers; `close()` stops it."""

    def __init__(self, root: str | Path, *, host: str = "127.0.0.1", port: int = 0,
                 idle_timeout_seconds: float = IDLE_TIMEOUT_SECONDS) -> None:
        self.root = Path(root).expanduser().resolve()
        os.makedirs(self.root, exist_ok=True)
        self._server = _Server((host, port), _handler(self.root, idle_timeout_seconds))
        self.host, self.port = str(self._server.server_address[0]), int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="bifrost-reports-http", daemon=True)

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> "ReportServer":
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(5)
        self._server.server_close()

    def __enter__(self) -> "ReportServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
