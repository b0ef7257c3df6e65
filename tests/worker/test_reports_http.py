"""`bifrost worker --reports-port`: stored reports open over HTTP; nothing outside the folder, nothing but reports."""

from __future__ import annotations

import http.client
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from activities.adapters.reports import LocalReportStore, S3ReportStore, report_key
from activities.adapters.targets import parse_targets
from bifrost_cli.main import cli
from worker.main import ReportsOptionError, report_store
from worker.reports_http import ReportServer


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ReportServer, LocalReportStore]]:
    with ReportServer(tmp_path / "reports") as server:
        yield server, LocalReportStore(server.root, server.url)


def raw_get(server: ReportServer, path: str, method: str = "GET") -> tuple[int, str, bytes]:
    """A request with the path exactly as given (httpx and browsers would normalise `..` away first)."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=5)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type") or "", resp.read()
    finally:
        conn.close()


async def test_a_stored_report_opens_at_its_url(served: tuple[ReportServer, LocalReportStore]):
    server, store = served
    page = "<!doctype html><title>checkout</title><p>PASS — score 100.00 ü</p>"
    url = await store.put(report_key("rollout/checkout/2.0.0", "eu-west-1-prod-canary"), page)
    assert url == store.url_for("rollout/checkout/2.0.0", "eu-west-1-prod-canary")
    assert url == f"{server.url}/rollout_checkout_2.0.0/eu-west-1-prod-canary.html"
    got = httpx.get(url)
    assert got.status_code == 200 and got.text == page
    assert got.headers["content-type"] == "text/html; charset=utf-8"
    assert "default-src 'none'" in got.headers["content-security-policy"] and got.headers["x-content-type-options"] == "nosniff"
    head = httpx.head(url)
    assert head.status_code == 200 and head.content == b"" and int(head.headers["content-length"]) == len(page.encode())


async def test_a_report_not_rendered_yet_is_a_404_that_says_so(served: tuple[ReportServer, LocalReportStore]):
    server, store = served
    got = httpx.get(store.url_for("rollout/checkout/2.0.0", "not-yet"))
    assert got.status_code == 404 and "reload shortly" in got.text and got.headers["content-type"].startswith("text/html")


def test_nothing_outside_the_folder_or_besides_reports_is_served(served: tuple[ReportServer, LocalReportStore],
                                                                 tmp_path: Path):
    server, _ = served
    (tmp_path / "secret.html").write_text("outside")  # a report-looking file just outside the folder
    (server.root / "r").mkdir()
    (server.root / "r" / "notes.txt").write_text("not a report")
    (server.root / "r" / ".tmp-half.html").write_text("<p>half")  # a report being written
    os.symlink(tmp_path / "secret.html", server.root / "r" / "link.html")
    (server.root / "r" / "ok.html").write_text("<p>ok")
    assert raw_get(server, "/r/ok.html")[0] == 200  # the folder does serve, so the refusals below mean something
    for path in ("/../../etc/passwd", "/../secret.html", "/r/../../secret.html", "/%2e%2e/secret.html",
                 "/r/%2E%2E/%2e%2e/secret.html", "/..%2fsecret.html", "/r/..%5c..%5csecret.html", "/r/link.html",
                 "/r/notes.txt", "/r/.tmp-half.html", "/r/", "/", "/r", "/r/ok.html%00.txt"):
        status, ctype, body = raw_get(server, path)
        assert status == 404 and b"outside" not in body and ctype.startswith("text/html"), path
    assert raw_get(server, "/r/ok.html", "POST")[0] == 405 and raw_get(server, "/r/ok.html", "DELETE")[0] == 405
    assert (server.root / "r" / "ok.html").read_text() == "<p>ok"


def test_worker_report_options_resolve_against_the_targets_file(tmp_path: Path):
    local = parse_targets({"reports": {"kind": "local", "dir": str(tmp_path / "file-dir"),
                                       "public_base_url": "https://reports.internal/"}})
    s3 = parse_targets({"reports": {"kind": "s3", "bucket": "my-reports", "aws_region": "eu-west-1"}})

    plain = report_store(None)
    assert isinstance(plain, LocalReportStore) and plain.root == Path(".bifrost/reports").resolve()
    assert plain.url_for("r", "a").startswith("file://")
    served = report_store(None, reports_dir=tmp_path / "d", serve=True, served_url="http://127.0.0.1:8099")
    assert served.url_for("r", "a") == "http://127.0.0.1:8099/r/a.html"
    from_file = report_store(local, serve=True, served_url="http://127.0.0.1:8099")
    assert isinstance(from_file, LocalReportStore) and from_file.root == tmp_path / "file-dir"
    assert from_file.url_for("r", "a") == "https://reports.internal/r/a.html"  # the file's public URL wins
    flag = report_store(local, reports_dir=tmp_path / "flag-dir", serve=True, reports_url="http://lb:80")
    assert isinstance(flag, LocalReportStore) and flag.root == tmp_path / "flag-dir"
    assert flag.url_for("r", "a") == "http://lb:80/r/a.html"  # and the command line wins over the file
    assert isinstance(report_store(s3), S3ReportStore)

    with pytest.raises(ReportsOptionError, match="stores reports in S3"):
        report_store(s3, serve=True)
    with pytest.raises(ReportsOptionError, match="give --reports-port too"):
        report_store(None, reports_url="http://lb:80")
    with pytest.raises(ReportsOptionError, match="must start with http"):
        report_store(None, serve=True, reports_url="lb:80")


def test_the_worker_command_refuses_contradicting_report_options(tmp_path: Path):
    targets = tmp_path / "targets.yaml"
    targets.write_text("reports: {kind: s3, bucket: my-reports, aws_region: eu-west-1}\n")
    res = CliRunner().invoke(cli, ["worker", "--targets", str(targets), "--reports-port", "0"])
    assert res.exit_code == 2 and "stores reports in S3" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(cli, ["worker", "--no-reports", "--reports-port", "0"])
    assert res.exit_code == 2 and "--no-reports draws no reports" in res.output and "Traceback" not in res.output


def _closed_by_server(sock: socket.socket) -> bool:
    """True once the server has closed its end (EOF or reset); False while the connection is still open."""
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionError:
        return True


def test_idle_connections_are_closed_after_the_idle_timeout(tmp_path: Path):
    """Half-open clients that never send a request each hold a thread; the server drops them after its timeout."""
    before = threading.active_count()
    with ReportServer(tmp_path / "reports", idle_timeout_seconds=0.5) as server:
        socks = [socket.create_connection((server.host, server.port), timeout=5) for _ in range(20)]
        for s in socks:
            s.setblocking(False)
        try:
            deadline = time.monotonic() + 10
            open_socks = list(socks)
            while open_socks and time.monotonic() < deadline:
                open_socks = [s for s in open_socks if not _closed_by_server(s)]
                time.sleep(0.05)  # poll interval, not a wait in place of a condition
            assert not open_socks, f"{len(open_socks)} of 20 idle connections still open after 10 s"
            deadline = time.monotonic() + 10
            while threading.active_count() > before + 1 and time.monotonic() < deadline:  # +1: serve_forever
                time.sleep(0.05)
            assert threading.active_count() <= before + 1
            # and the server still answers
            assert raw_get(server, "/missing.html")[0] == 404
        finally:
            for s in socks:
                s.close()


def test_a_download_aborted_midway_logs_one_line_and_no_traceback(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                                   capfd: pytest.CaptureFixture[str]):
    caplog.set_level(logging.INFO, logger="bifrost.reports_http")
    with ReportServer(tmp_path / "reports") as server:
        (server.root / "big.html").write_bytes(b"<p>" + b"x" * (32 * 1024 * 1024))
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((server.host, server.port))
        sock.sendall(b"GET /big.html HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(1024).startswith(b"HTTP/1.0 200")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
        sock.close()
        deadline = time.monotonic() + 10
        while not [r for r in caplog.records if r.name == "bifrost.reports_http"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert raw_get(server, "/missing.html")[0] == 404  # still serving
    lines = [r for r in caplog.records if r.name == "bifrost.reports_http"]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert "went away" in lines[0].getMessage() and lines[0].exc_info is None
    assert "Traceback" not in capfd.readouterr().err
