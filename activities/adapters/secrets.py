"""Secrets by reference, and the one place credentials are taken out of text.

The targets file names an environment variable; activities read it when they need it, so values never
enter workflow inputs or results. Every value read (and the userinfo of every URL in the targets file) is
remembered in this process with its encoded forms (URL-encoded, base64, hex: a server may echo a basic
credential as bare base64), and `redact` removes them and anything shaped like a credential (URL userinfo, key/token/signature query
parameters, `Bearer`/`Basic` tokens, AWS presigning parameters) from text on its way to an error
message, a log line, a history, a webhook or the terminal.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import threading
from collections.abc import Iterable
from urllib.parse import quote, quote_plus, unquote, urlsplit

MASK = "***"
_MIN_SECRET = 8  # shorter values (e.g. "testing", "1") would mask ordinary words; patterns still catch their shapes
_MIN_FORM = 8  # an encoded form (e.g. the stable middle of an embedded base64 echo) shorter than this is not masked

_known: set[str] = set()  # every secret value remembered, as given
_forms: set[str] = set()  # every encoded form of them that `redact` masks
_known_lock = threading.Lock()
_known_forms: re.Pattern[str] | None = None  # one alternation (a trie) of every form, longest first at each branch
_PERCENT = re.compile(r"%[0-9A-F]{2}")

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


def _b64_middles(raw: bytes, alphabet: bytes | None) -> set[str]:
    """The base64 characters of `raw` that stay the same wherever it sits inside a longer base64 string.

    Base64 packs 3 bytes into 4 characters, so inside a longer encoded string `raw` starts at one of 3 bit
    alignments; at each, the characters whose 6 bits all come from `raw` are fixed (its edges are not)."""
    out = set()
    for k in range(3):
        enc = base64.b64encode(b"\0" * k + raw, altchars=alphabet).decode()
        out.add(enc[-(-8 * k // 6): 8 * (k + len(raw)) // 6])
    return out


def encoded_forms(value: str) -> set[str]:
    """Every way `value` may come back from a server or a library: as given, URL-encoded (`quote`, `quote_plus`,
    lower-case escapes), JSON-escaped, hex, and base64 (standard and URL-safe, with and without padding, and the
    stable middle of it embedded in a longer base64 string at each of the 3 alignments)."""
    raw = value.encode("utf-8", "surrogatepass")
    forms = {value, quote(value, safe=""), quote(value), quote_plus(value), json.dumps(value)[1:-1],
             raw.hex(), raw.hex().upper()}
    forms |= {_PERCENT.sub(lambda m: m.group(0).lower(), f) for f in list(forms)}
    for alphabet in (None, b"-_"):
        full = base64.b64encode(raw, altchars=alphabet).decode()
        forms |= {full, full.rstrip("="), *_b64_middles(raw, alphabet)}
    return {f for f in forms if len(f) >= _MIN_FORM}


def _trie_pattern(words: Iterable[str]) -> str:
    """One regex matching any of `words`, as a trie (shared prefixes once; the longest match first), so a
    line is scanned once however many words there are."""
    root: dict[str, dict] = {}  # type: ignore[type-arg]
    for w in words:
        node = root
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict) -> str:  # type: ignore[type-arg]
        out = ""
        while len(node) == 1 and "" not in node:  # a chain without branches: no group, no recursion
            (ch, node), = node.items()
            out += re.escape(ch)
        alts = [re.escape(ch) + emit(child) for ch, child in sorted(node.items()) if ch]
        if not alts:
            return out
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        return out + (f"(?:{body})?" if "" in node else body)

    return emit(root)


def _remember(values: Iterable[str]) -> None:
    """Add `values` (those long enough) and their encoded forms to what `redact` masks; recompile only on news."""
    global _known_forms
    new = {v for v in values if len(v) >= _MIN_SECRET} - _known
    if not new:
        return
    forms = set().union(*(encoded_forms(v) for v in new))
    with _known_lock:
        _known.update(new)
        _forms.update(forms)
        _known_forms = re.compile(_trie_pattern(_forms))


def remember_basic_credential(user: str | None, password: str | None) -> None:
    """Have `redact` remove a basic-auth credential: the password and `user:password` in every encoding (the
    `Authorization: Basic` value is base64 of `user:password`, which a server may echo without the `Basic`)."""
    if password:
        _remember([password, f"{user or ''}:{password}"])


def remember_secret(value: str | None) -> None:
    """Have `redact` remove `value` in every encoding (and, for a URL, its userinfo, path and query on their own)."""
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
            if url.password:
                remember_basic_credential(unquote(url.username or ""), unquote(url.password))
    _remember(parts)


def remember_url_credentials(url: str) -> None:
    """Remember the userinfo of a URL written in the targets file (e.g. Prometheus' `http://user:pw@host`),
    in every encoding: httpx sends it as basic auth, and a server may echo that back."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return
    if parts.password:
        remember_basic_credential(unquote(parts.username or ""), unquote(parts.password))
        _remember([unquote(parts.password), parts.password])
    elif parts.username and "@" in parts.netloc:
        _remember([unquote(parts.username), parts.username])  # a token as userinfo: https://TOKEN@host


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


@functools.lru_cache(maxsize=64)
def _extra_pattern(values: tuple[str, ...]) -> re.Pattern[str]:
    """The pattern for secrets passed to one `redact` call: each as given (whatever its length) and encoded."""
    return re.compile(_trie_pattern(set(values).union(*(encoded_forms(v) for v in values))))


def redact(text: str, *secrets: str | None) -> str:
    """`text` with every remembered secret (in every encoding, see `encoded_forms`), each of `secrets`, and
    anything shaped like a credential replaced by '***'."""
    extra = tuple(sorted({s for s in secrets if s and s not in _known}))
    if extra:
        text = _extra_pattern(extra).sub(MASK, text)
    if _known_forms is not None:
        text = _known_forms.sub(MASK, text)
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    return text
