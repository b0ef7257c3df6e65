"""`secrets.redact`, the one place credentials leave text: known values and credential shapes, wherever text goes."""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote, quote_plus, unquote, unquote_plus

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from temporalio.exceptions import ApplicationError

from activities.adapters import secrets
from activities.adapters.base import DeployError, one_line
from activities.adapters.registry import registry_from_targets
from activities.adapters.secrets import redact, remember_basic_credential, remember_secret, resolve_secret
from activities.adapters.targets import load_targets
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


# --- secrets by value, in every encoding (issue #29 a) ---

@contextmanager
def only_these_secrets() -> Iterator[None]:
    """Run with nothing remembered, and restore what was remembered before (the set is process-wide)."""
    saved = set(secrets._known), set(secrets._forms), secrets._known_forms
    secrets._known.clear()
    secrets._forms.clear()
    secrets._known_forms = None
    try:
        yield
    finally:
        secrets._known.clear()
        secrets._known.update(saved[0])
        secrets._forms.clear()
        secrets._forms.update(saved[1])
        secrets._known_forms = saved[2]


def _b64_decodings(text: str) -> Iterator[bytes]:
    """Every byte string any run of base64 characters in `text` decodes to, from each of its 4 character offsets
    (so every bit alignment), in either alphabet."""
    for run in re.findall(r"[A-Za-z0-9+/_=-]{2,}", text):
        chars = run.replace("=", "").replace("-", "+").replace("_", "/")
        for start in range(4):
            part = chars[start:]
            part = part[: len(part) - len(part) % 4 + (len(part) % 4 if len(part) % 4 > 1 else 0)]
            try:
                yield base64.b64decode(part + "=" * (-len(part) % 4))
            except (binascii.Error, ValueError):
                continue


def _hex_decodings(text: str) -> Iterator[bytes]:
    for run in re.findall(r"[0-9a-fA-F]{2,}", text):
        for start in (0, 1):
            part = run[start:]
            yield bytes.fromhex(part[: len(part) // 2 * 2])


def surviving_forms(secret: str, text: str) -> list[str]:
    """How `secret` can still be read back from `text`: plain, URL-decoded, JSON-escaped, base64 or hex decoded."""
    raw = secret.encode()
    found = [name for name, t in (("plain", text), ("url-decoded", unquote(text)), ("form-decoded", unquote_plus(text)))
             if secret in t]
    if json.dumps(secret)[1:-1] in text:
        found.append("json-escaped")
    found += ["base64"] if any(raw in d for d in _b64_decodings(text)) else []
    found += ["hex"] if any(raw in d for d in _hex_decodings(text)) else []
    return found


SECRETS = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF, exclude_characters="*"), min_size=8, max_size=40)
FILLER = st.text(st.characters(min_codepoint=32, max_codepoint=126, exclude_characters="*"), max_size=24)


def _b64(raw: bytes, urlsafe: bool, pad: bool) -> str:
    enc = (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(raw).decode()
    return enc if pad else enc.rstrip("=")


@st.composite
def echoes(draw: st.DrawFn, secret: str, user: str) -> str:
    """`secret` (or the basic credential `user:secret`) as a server might echo it, inside some text."""
    raw = secret.encode()
    shape = draw(st.sampled_from(["plain", "quote", "quote_plus", "base64", "basic", "embedded", "hex"]))
    urlsafe, pad = draw(st.booleans()), draw(st.booleans())
    if shape == "plain":
        echo = secret
    elif shape == "quote":
        echo = quote(secret, safe="")
    elif shape == "quote_plus":
        echo = quote_plus(secret)
    elif shape == "base64":
        echo = _b64(raw, urlsafe, pad)
    elif shape == "basic":
        echo = _b64(f"{user}:{secret}".encode(), urlsafe, pad)
    elif shape == "hex":
        echo = raw.hex() if draw(st.booleans()) else raw.hex().upper()
    else:  # the secret inside a longer base64 string, at any byte alignment
        before, after = draw(st.binary(max_size=7)), draw(st.binary(max_size=7))
        echo = _b64(before + raw + after, urlsafe, pad)
    text = draw(FILLER) + echo + draw(FILLER)
    container = draw(st.sampled_from(["bare", "json", "url"]))
    if container == "json":
        return json.dumps({"status": "error", "error": text})
    if container == "url":
        return f"GET https://prom.example.com/api/v1/query?q={text}&x=1"
    return text


@settings(max_examples=300, deadline=None)
@given(st.data(), SECRETS, st.text(st.characters(min_codepoint=33, max_codepoint=126, exclude_characters=":*"), max_size=12))
def test_no_decodable_form_of_a_remembered_secret_survives(data: st.DataObject, secret: str, user: str):
    text = data.draw(echoes(secret, user))
    with only_these_secrets():
        remember_secret(secret)
        remember_basic_credential(user, secret)
        out = redact(text)
    assert not surviving_forms(secret, out), (text, out)


def test_the_checker_finds_every_echo_shape_unredacted():
    """The property above is only as good as `surviving_forms`: each shape, unredacted, is found."""
    secret = "hunter2-hunter2"
    raw = secret.encode()
    for echo in (secret, quote(secret), quote_plus(secret), _b64(raw, False, True), _b64(raw, True, False),
                 _b64(b"promuser:" + raw, False, True), raw.hex(), *(_b64(b"xyz" + b"x" * k + raw + b"yz", False, False)[4:]
                                                                       for k in range(3))):
        assert surviving_forms(secret, f"body: {echo}!"), echo


def test_a_bare_base64_basic_credential_from_a_targets_file_url_is_masked(tmp_path: Path):
    password = f"pw-{uuid.uuid4().hex[:12]}"
    doc = {"targets": [{"region": "us-east-1", "environment": "prod", "deployer": {"kind": "simulated"},
                        "metrics": {"kind": "prometheus", "url": f"http://promuser:{password}@prom:9090",
                                    "queries": {"latency_p99": "q{version}"}}}]}
    (tmp_path / "targets.yaml").write_text(yaml.safe_dump(doc))
    echo = base64.b64encode(f"promuser:{password}".encode()).decode()
    with only_these_secrets():
        assert redact(f"401: rejected {echo}") == f"401: rejected {echo}"  # nothing has the shape of a credential
        registry_from_targets(load_targets(tmp_path / "targets.yaml"))
        out = redact(f"401: rejected {echo}; also {quote(password)} and {password.encode().hex()}")
    assert out == "401: rejected ***; also *** and ***", out


def test_a_long_secret_and_many_secrets_compile_once_and_stay_cheap():
    token = "A" + uuid.uuid4().hex * 40  # a session token can be ~1,000 characters
    with only_these_secrets():
        for i in range(50):
            remember_secret(f"secret-{i}-{uuid.uuid4().hex}")
        remember_secret(token)
        pattern = secrets._known_forms
        remember_secret(token)  # nothing new: nothing recompiled
        assert secrets._known_forms is pattern
        assert redact(f"x {base64.b64encode(token.encode()).decode()} y") == "x *** y"
