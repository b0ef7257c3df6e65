"""`secrets.redact`, the one place credentials leave text: known values and credential shapes, wherever text goes."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pytest
from temporalio.exceptions import ApplicationError

from activities.adapters.base import DeployError, one_line
from activities.adapters.secrets import redact, resolve_secret
from activities.errors import error_text, reports_adapter_errors
from worker import logs


@pytest.mark.parametrize(("text", "gone"), [
    ("POST https://hooks.example.com/x?key=K3Y-abc&v=1", "K3Y-abc"),
    ("GET http://alice:s3cr3t-pw@prom:9090/api/v1/query", "s3cr3t-pw"),
    ("https://b.s3.amazonaws.com/k.html?AWSAccessKeyId=AKIAXYZ&Signature=abc%2F&x-amz-security-token=FQoG", "AKIAXYZ"),
    ("https://b.s3.amazonaws.com/k.html?X-Amz-Credential=AKIAXYZ%2F2026&X-Amz-Signature=deadbeef", "deadbeef"),
    ("401 (invalid token: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig)", "eyJhbGciOiJIUzI1NiJ9"),
    ("headers: {'Authorization': 'Basic YWxpY2U6cHc=', 'Accept': 'x'}", "YWxpY2U6cHc="),
])
def test_credential_shapes_are_redacted_and_the_rest_stays(text: str, gone: str):
    out = redact(text)
    assert gone not in out and "***" in out
    assert out.split("***")[0] == text.split(gone)[0][: len(out.split("***")[0])]  # what came before is kept


def test_a_secret_read_from_the_environment_is_redacted_everywhere_after(monkeypatch: pytest.MonkeyPatch):
    value = f"plain-{uuid.uuid4().hex}"  # no credential shape: only knowing the value finds it
    monkeypatch.setenv("TEST_REDACT_SECRET", value)
    assert redact(f"server said {value}") == f"server said {value}"
    assert resolve_secret("TEST_REDACT_SECRET", "test") == value
    assert redact(f"server said {value}") == "server said ***"
    err = DeployError("could not deploy", status=401, detail=f"you sent {value}\nwhich is wrong")
    assert value not in str(err) and value not in str(err.fields()) and "\n" not in str(err)
    assert value not in one_line(f"x {value}", 20) and value[:15] not in one_line(f"x {value}", 20)


def test_error_text_redacts_what_a_workflow_shows():
    err = ApplicationError("boom: GET https://u:hunter2-pw@h/x?token=abcdefgh", type="HTTPError")
    assert "hunter2-pw" not in error_text(err) and "abcdefgh" not in error_text(err)


async def test_an_activity_error_that_is_not_an_adapter_error_leaves_redacted():
    @reports_adapter_errors
    async def act() -> None:
        raise RuntimeError("failed GET https://x/?api_key=ZZZ-secret-ZZZ")

    with pytest.raises(ApplicationError) as got:
        await act()
    assert "ZZZ-secret-ZZZ" not in str(got.value) and got.value.type == "RuntimeError" and got.value.__cause__ is None


@pytest.fixture
def redacting_logs() -> Iterator[None]:
    factory = logging.getLogRecordFactory()
    logs.install_redaction()
    try:
        yield
    finally:
        logging.setLogRecordFactory(factory)
        logs._installed = False


def test_every_log_record_is_redacted_whichever_handler_prints_it(redacting_logs: None, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO)
    logging.getLogger("some.library").info("HTTP Request: POST %s %s", "https://h/hook?key=KEY-12345678", "200")
    assert "KEY-12345678" not in caplog.text and "key=***" in caplog.text
    try:
        raise ValueError("Bearer abcdefgh12345678")
    except ValueError:
        logging.getLogger("x").exception("failed")
    assert "abcdefgh12345678" not in logs.JsonFormatter().format(caplog.records[-1])


def test_the_worker_keeps_http_clients_per_request_lines_out_of_an_info_log():
    levels = {n: logging.getLogger(n).level for n in logs.CHATTY_LOGGERS}
    try:
        logs.quiet_chatty_loggers()
        assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
        assert not logging.getLogger("botocore.endpoint").isEnabledFor(logging.INFO)
        assert logging.getLogger("httpx").isEnabledFor(logging.WARNING)
    finally:
        for n, level in levels.items():
            logging.getLogger(n).setLevel(level)
