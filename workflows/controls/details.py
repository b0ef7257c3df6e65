"""Pieces of the Temporal UI's Current Details that several workflows' pages share: the placeholder a person
replaces with their name, table rows the UI spaces out, links a browser can open, times, audit lines.

Each workflow's own page is written in its package's details.py; these only keep the shared pieces alike."""

from __future__ import annotations

from datetime import datetime

from common.text import markdown as md
from common.text import visible, web_url
from workflows.controls.audit import AuditEntry

WHO = "<your name>"  # in the example payloads of "how to act": the person types their own name there
AUDIT_LINES = 5  # the recent actions a page shows
GAP = "\u2003"  # an em space after each table cell: the UI 2.54 renders tables without cell padding


def row(cells: list[str]) -> str:
    """One Markdown table row, each cell followed by GAP so the UI does not run the cells together."""
    return "| " + " | ".join(f"{c}{GAP}" for c in cells) + " |"


def when(at: datetime | None) -> str:
    """A time as the pages show it: `2026-12-01 09:30 UTC`, or `?`."""
    return f"{at:%Y-%m-%d %H:%M} UTC" if at is not None else "?"


def link(text: str, url: str | None) -> str:
    """A Markdown link when a browser can open `url`; otherwise the text, with a worker-local path in backticks."""
    if not url:
        return md(text)
    if (link := web_url(url)) is not None:
        return f"[{md(text)}]({link})"
    path = visible(url).replace("`", "'")
    return f"{md(text)} (`{path}`)"


def audit_line(a: AuditEntry) -> str:
    """One audit entry in one line: `12-01 09:30 alice: approve wave-4 — looks good` (escape it where shown)."""
    target = f" {a.target}" if a.target else ""
    detail = f" — {a.detail}" if a.detail else ""
    return f"{a.at:%m-%d %H:%M} {a.who}: {a.action}{target}{detail}"
