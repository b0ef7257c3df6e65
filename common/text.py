"""Names and free text at the trust boundary: what an identity may be, and escaping for where text is shown.

Anyone who may send an update may type anything into a field (docs/security.md §5). Identities (`by`,
`approver`, `requested_by`) are refused unless they are one line of plain ASCII, so that a Cyrillic "а" can
never pass for a Latin "a" and no name can start a forged audit line. Free text (reasons, comments, errors
from the outside world) is accepted as written and escaped where it is shown: `markdown` for the Temporal
UI's details and summaries, `html` for reports, `terminal` for the CLI, `slack` for chat webhooks.
"""

from __future__ import annotations

import html as _html
import re
import unicodedata
from typing import Annotated

from pydantic import AfterValidator, Field

MAX_IDENTITY = 200
IDENTITY_CHARS = "letters A-Z a-z, digits, single spaces and . _ @ + - ' [ ] /"
_IDENTITY = re.compile(r"[A-Za-z0-9._@+'\[\]/-]+(?: [A-Za-z0-9._@+'\[\]/-]+)*", re.ASCII)
# what starts Markdown inside a line: code, emphasis, links and images, HTML and autolinks, entities, table cells,
# strikethrough, headings; and what starts a block at the beginning of one (lists, quotes, setext underlines)
_MD_INLINE = re.compile(r"([\\`*_\[\]<>&|~#])")
_DASHES = re.compile(r"(-{2,}[A-Za-z0-9-]*)")  # a flag like --to: in a code span, which no typographer turns into a dash
_MD_BLOCK_START = re.compile(r"^([-+=>]|\d+(?=[.)]))")
# a slash between digits: the UI's renderer (gomarkdown with SmartypantsFractions) typesets digits/digits after a
# word boundary as a fraction (`pay-264854/2.0.0` as pay-²⁶⁴⁸⁵⁴⁄₂.0.0, `look 1/3` as ¹⁄₃); written as a numeric
# entity, the slash is a text node of its own, so no fraction is formed and the page shows (and copies) a plain "/"
_FRACTION_SLASH = re.compile(r"(?<=[0-9])([/\u2044])(?=[0-9])")
_SLASH_ENTITY = {"/": "&#47;", "\u2044": "&#8260;"}


def visible(text: str) -> str:
    """`text` with every non-printable character (newlines, ESC, bidi overrides, ...) written as its escape."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def terminal(text: str) -> str:
    """Text safe to print on a terminal: one line, no control or escape sequences (shown as \\x1b, \\n, ...)."""
    return visible(text)


def markdown(text: str) -> str:
    """Text shown as itself in Markdown, inline or at the start of a line: one line (control characters as
    escapes), with a backslash before every character that could start a heading, list, quote, link, image,
    HTML tag, entity, table cell, code span or emphasis (CommonMark lets any ASCII punctuation be escaped); runs of
    hyphens (a flag such as `--to`) go in a code span, since the UI's typographer turns a bare `--` into a dash, and
    a slash between digits is an entity, since it would typeset `4/2` as a fraction (see `ratio`)."""
    flat = _no_fractions(_DASHES.sub(r"`\1`", _MD_INLINE.sub(r"\\\1", visible(text).lstrip(" "))))
    start = _MD_BLOCK_START.match(flat)
    if start is None:
        return flat
    return f"{flat[:start.end()]}\\{flat[start.end():]}" if start.group(1)[0].isdigit() else f"\\{flat}"


def _no_fractions(escaped: str) -> str:
    """Escaped Markdown with each slash between two digits written as its entity (never inside a code span)."""
    return _FRACTION_SLASH.sub(lambda m: _SLASH_ENTITY[m.group(1)], escaped)


def ratio(part: int | str, whole: int | str) -> str:
    """`part/whole` in a Markdown line of our own ("look 1/3", "wave 2/4"): the UI shows it as typed, where a bare
    `1/3` would be typeset as a fraction with a superscript and a subscript. Markdown only: the CLI prints `1/3`."""
    return f"{part}&#47;{whole}"


def code_span(text: str) -> str:
    """Text shown as itself in a Markdown code span (where backslash escapes are not read): one line, fenced by one
    more backtick than the longest run inside it, padded when it starts or ends with a backtick."""
    flat = visible(text)
    longest = max((len(run) for run in re.findall(r"`+", flat)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") or not flat.strip() else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


_SLACK_ENTITIES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})
_SLACK_FORMAT = re.compile(r"(?<![A-Za-z0-9])([*_~`])|([*_~`])(?![A-Za-z0-9])")  # not inside a word like latency_p99
_ZWSP = "\u200b"


def slack(text: str) -> str:
    """Text shown as itself in Slack mrkdwn: one line; `& < >` as the entities Slack asks for (so no `<!channel>`,
    `<@U123>` or `<url|label>` can be formed); a zero-width space before each of * _ ~ and the backtick that is not inside a word
    (Slack has no escape for them, and the space keeps them from pairing into bold, italics, strikethrough or code;
    inside a word, as in latency_p99, Slack does not format and the name stays as typed)."""
    return _SLACK_FORMAT.sub(lambda m: _ZWSP + (m.group(1) or m.group(2)), visible(text).translate(_SLACK_ENTITIES))


def html(text: str) -> str:
    """Text shown as itself in HTML, in element content or a quoted attribute."""
    return _html.escape(text, quote=True)


def web_url(url: str | None) -> str | None:
    """`url` if a browser may follow it as a link (http or https, printable, no spaces); else None."""
    if not url or not url.startswith(("http://", "https://")):
        return None
    if any(not c.isprintable() or c.isspace() or c in "<>\"'`()" for c in url):
        return None
    return url


def identity_problem(value: str, limit: int = MAX_IDENTITY) -> str | None:
    """Why `value` cannot name a person or a bot in the audit trail, or None when it can."""
    if not value.strip():
        return "must not be blank"
    if len(value) > limit:
        return f"{len(value)} characters; at most {limit} are allowed"
    if _IDENTITY.fullmatch(value):
        return None
    odd = next((c for c in value if not c.isascii() or not c.isprintable()), None)
    if odd is not None and not odd.isprintable():
        return f"must be printable text on one line; it contains {odd!r}"
    if odd is not None:
        name = unicodedata.name(odd, "unnamed character")
        return (f"contains {odd!r} (U+{ord(odd):04X} {name}); identities are plain ASCII so that none can pass for "
                f"another (use {IDENTITY_CHARS})")
    return f"use only {IDENTITY_CHARS}, without leading, trailing or double spaces (got {visible(value)[:60]!r})"


def check_identity(value: str) -> str:
    """A pydantic after-validator: `value` unchanged when it is a valid identity; else ValueError saying why."""
    problem = identity_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


Identity = Annotated[str, AfterValidator(check_identity),
                     Field(description="who acts, as recorded in the audit trail: one line of plain ASCII")]
