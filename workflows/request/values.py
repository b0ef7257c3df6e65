"""Checks of single values a person types into a request: an OCI image reference, an IANA time zone, a date, a
metric's bounds, text that is not Unicode."""

from __future__ import annotations

import functools
import math
import re
from datetime import date, datetime
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

from canary.config import MetricSpec
from common.problems import show
from workflows.request.bounds import MAX_METRIC_NAME, MAX_METRICS

# An OCI image reference: [registry[:port]/]path[:tag][@sha256:<64 hex>] (the distribution spec's grammar)
_DOMAIN_PART = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_DOMAIN = re.compile(rf"{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]{{1,5}})?", re.ASCII)
_PATH_PART = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*", re.ASCII)
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", re.ASCII)
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}", re.ASCII)
CLOCK = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])(?::([0-5][0-9])(?:\.([0-9]{1,6}))?)?", re.ASCII)


def image_reference_problem(ref: str) -> str | None:
    """Why `ref` is not an OCI image reference, or None if it is one."""
    if ref != ref.strip():
        return "remove the spaces around it"
    if not ref:
        return "it is empty"
    if len(ref) > 512:
        return f"it is {len(ref)} characters long; image references are at most 512"
    odd = next((c for c in ref if not (c.isascii() and (c.isalnum() or c in "._-:/@"))), None)
    if odd is not None:
        return f"it contains {show(odd)}; image references have only letters, digits and . _ - : / @"
    rest, at, digest = ref.partition("@")
    if at and not _DIGEST.fullmatch(digest):
        return "the digest after '@' must be sha256: and 64 lowercase hex digits"
    parts = rest.split("/")
    first = parts[0]
    domain = len(parts) > 1 and ("." in first or ":" in first or first == "localhost")
    if domain:
        if not _DOMAIN.fullmatch(first):
            return f"{show(first)} is not a registry host[:port]"
        parts = parts[1:]
    last = parts[-1]
    tag = None
    if ":" in last:
        last, tag = last.split(":", 1)
        parts[-1] = last
    if tag is not None and not _TAG.fullmatch(tag):
        return "the tag after ':' must be letters, digits, '_', '.' or '-' (at most 128, not starting with '.' or '-')"
    for part in parts:
        if not _PATH_PART.fullmatch(part):
            if part.lower() != part and _PATH_PART.fullmatch(part.lower()):
                return f"the repository path must be lower case ({show(part)})"
            return (f"{show(part)} is not a repository path component: lower-case letters and digits, "
                    "separated by '.', '_', '__' or dashes")
    if len(rest) - (len(tag) + 1 if tag is not None else 0) > 255:
        return "the repository name is longer than 255 characters"
    return None


def lone_surrogate(value: object, path: str) -> str | None:
    """The path of the first string (key or value) that cannot be written as UTF-8, else None."""
    if isinstance(value, str):
        return path or "(top level)" if any("\ud800" <= c <= "\udfff" for c in value) else None
    if isinstance(value, dict):
        for k, v in value.items():
            sub = f"{path}.{k}" if path else str(k)
            found = lone_surrogate(k, sub) or lone_surrogate(v, sub)
            if found:
                return found
    if isinstance(value, list | tuple):
        for i, v in enumerate(value):
            found = lone_surrogate(v, f"{path}.{i}")
            if found:
                return found
    return None


@functools.cache
def _zones() -> frozenset[str]:
    from zoneinfo import available_timezones

    return frozenset(available_timezones()) | {"UTC"}


def known_time_zone(v: str) -> str:
    """An IANA zone name, checked by a set lookup: never a file opened by name ('Europe' is a tzdata
    directory, '../x' a path)."""
    if v not in _zones():
        raise ValueError(f"unknown IANA time zone {show(v)}; use names like 'Europe/Dublin' or 'UTC'")
    return v


TimeZone = Annotated[str, AfterValidator(known_time_zone)]


def metric_bounds(m: MetricSpec) -> MetricSpec:
    """Bounds the judge's own model leaves open: name length, finite thresholds, a few groups."""
    if len(m.name) > MAX_METRIC_NAME:
        raise ValueError(f"name is {len(m.name)} characters long; at most {MAX_METRIC_NAME} are allowed")
    for field in ("allowed_increase", "allowed_decrease", "critical_increase", "critical_decrease"):
        value = getattr(m, field)
        if value is not None and not math.isfinite(value):
            raise ValueError(f"{field} must be a finite number (got {value})")
    if len(m.groups) > MAX_METRICS or any(len(g) > MAX_METRIC_NAME for g in m.groups):
        raise ValueError(f"groups: at most {MAX_METRICS} groups of at most {MAX_METRIC_NAME} characters each")
    return m



def _iso_date(v: object) -> object:
    """A date as YAML reads it (a date) or as JSON writes it ("2026-12-24"); nothing else (no numbers)."""
    if isinstance(v, str):
        if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", v):
            raise ValueError(f'expected a date "YYYY-MM-DD", got {show(v)}')
        try:
            return date.fromisoformat(v)
        except ValueError as err:
            raise ValueError(f"{show(v)} is not a date: {err}") from None
    if isinstance(v, datetime):
        raise ValueError(f"expected a date without a time, got {v.isoformat()}")
    return v


IsoDate = Annotated[date, BeforeValidator(_iso_date)]
