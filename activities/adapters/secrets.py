"""Secrets by reference, and the one place credentials are taken out of text.

The targets file names an environment variable; activities read it when they need it, so values never
enter workflow inputs or results. Every value read is remembered in this process, and `redact` removes
remembered values and anything shaped like a credential (URL userinfo, key/token/signature query
parameters, `Bearer`/`Basic` tokens, AWS presigning parameters) from text on its way to an error
message, a log line, a history, a webhook or the terminal.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit

MASK = "***"
_MIN_SECRET = 8  # shorter values (e.g. "testing", "1") would mask ordinary words; patterns still catch their shapes

_known: set[str] = set()
_known_lock = threading.Lock()
_known_sorted: tuple[str, ...] = ()

# query parameters whose value is a credential (case-insensitive); X-Amz-* covers SigV4 presigned URLs
_QUERY_KEYS = (r"(?:x-amz-[a-z0-9-]+|awsaccesskeyid|signature|sig|key|api[_-]?key|apikey|token|access[_-]?token|"
               r"auth|password|passwd|pwd|secret|client[_-]?secret|code|session|credential)")
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # scheme://user:password@host  and  scheme://token@host
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@?#'\"<>]+@"), rf"\1{MASK}@"),
    # ?key=value / &token=value (also percent-encoded separators are left alone: only literal ones)
    (re.compile(rf"(?i)([?&;]{_QUERY_KEYS}=)[^&\s#'\"<>]*"), rf"\1{MASK}"),
    # Authorization: Bearer xyz / Basic xyz / token xyz
    (re.compile(r"\b(Bearer|bearer|BEARER|Basic|BASIC)(\s+)[A-Za-z0-9._~+/=-]{8,}"), rf"\1\2{MASK}"),
    # "authorization": "..." in a dumped header map
    (re.compile(r"(?i)(['\"]?(?:authorization|x-api-key|x-amz-security-token)['\"]?\s*[:=]\s*['\"]?)[^'\",})\]\s]+(\s+[^'\",})\]\s]+)?"),
     rf"\1{MASK}"),
)


class SecretError(RuntimeError):
    """A referenced secret is not set in the worker's environment."""


def remember_secret(value: str | None) -> None:
    """Have `redact` remove `value` (and, for a URL, its userinfo, path and query on their own) from now on."""
    if not value:
        return
    parts = {value}
    if "://" in value:
        try:
            url = urlsplit(value)
        except ValueError:
            url = None
        if url is not None:
            parts.update(p for p in (url.password, url.username if url.password else None,
                                     url.path if url.path.count("/") > 1 else None, url.query) if p)
            parts.update(unquote(p) for p in list(parts))
    global _known_sorted
    with _known_lock:
        _known.update(p for p in parts if len(p) >= _MIN_SECRET)
        _known_sorted = tuple(sorted(_known, key=len, reverse=True))


def remember_secrets_from_env(env_names: Iterable[str]) -> None:
    """Remember the values of these environment variables (those set), e.g. every `*_env` the targets file names."""
    for name in env_names:
        remember_secret(os.environ.get(name))


def resolve_secret(env_name: str, purpose: str) -> str:
    """Read the secret held in `env_name`; raise a `SecretError` naming it and what needs it when it is unset."""
    value = os.environ.get(env_name)
    if not value:
        raise SecretError(
            f"{purpose}: environment variable {env_name} is not set or empty on this worker; "
            f"export it in the worker's environment (the targets file only names it)"
        )
    remember_secret(value)
    return value


def redact(text: str, *secrets: str | None) -> str:
    """`text` with every known secret, each of `secrets`, and anything shaped like a credential replaced by '***'."""
    for s in (*sorted((s for s in secrets if s), key=len, reverse=True), *_known_sorted):
        if s in text:
            text = text.replace(s, MASK)
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    return text
