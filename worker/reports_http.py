"""`bifrost worker --reports-port`: the reports folder, read-only over HTTP, so the Temporal UI's links open in a browser.

Standard library only (ThreadingHTTPServer in a daemon thread): GET and HEAD of `.html` files under the
folder, nothing else — no listings, no paths outside the folder (`..`, encoded or not, and symlinks out).
"""

from __future__ import annotations

import html
import os
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

# the reports are self-contained: inline CSS and data: images, nothing to fetch, nothing to run
_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


def _handler(root: Path) -> type[BaseHTTPRequestHandler]:
    class ReportHandler(BaseHTTPRequestHandler):
        server_version = "bifrost-reports"
        sys_version = ""

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
            pass  # the worker logs JSON; a request log per report view is noise

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


class ReportServer:
    """Serves `root` read-only on host:port in a daemon thread; `url` is where it answers; `close()` stops it."""

    def __init__(self, root: str | Path, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.root = Path(root).expanduser().resolve()
        os.makedirs(self.root, exist_ok=True)
        self._server = ThreadingHTTPServer((host, port), _handler(self.root))
        self._server.daemon_threads = True
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
