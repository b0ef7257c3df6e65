"""Turning pydantic validation errors into one readable line per problem, naming the field."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

from pydantic import BaseModel, ValidationError

# a message that already starts with the field it is about, e.g. "regions.traffic_share: shares must add up to 1.0"
_NAMES_FIELD = re.compile(r"^[A-Za-z_][\w.\[\]-]*: ")


def shorten(text: str, limit: int = 80) -> str:
    """`text` on one line and at most `limit` characters: control characters escaped, the middle cut."""
    flat = text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    if len(flat) <= limit:
        return flat
    keep = max(limit - 1, 2)
    return f"{flat[: keep - keep // 3]}…{flat[len(flat) - keep // 3:]}"


MAX_PROBLEMS = 50  # lines a refusal's listing takes at most; past that, 49 problems and "… and N more problems"
MAX_PROBLEM_CHARS = 400  # characters of one listed problem (the middle is cut)


def bounded(problems: Iterable[str], limit: int = MAX_PROBLEMS, width: int = MAX_PROBLEM_CHARS) -> list[str]:
    """At most `limit` lines, each one line of at most `width` characters: every problem if there are that few,
    else the first `limit - 1` and "… and N more problems" (60,000 unknown keys: 50 lines, not 4 MB of them)."""
    shown: list[str] = []
    more = 0
    for p in problems:
        if len(shown) < limit:
            shown.append(shorten(p, width))
        else:
            more += 1
    if more:
        more += 1
        shown[-1] = f"… and {more} more problems"
    return shown


def listing(problems: Iterable[str], bullet: str = "  - ") -> str:
    """The problems as a bulleted list, one per line, bounded (see `bounded`)."""
    return "\n".join(f"{bullet}{p}" for p in bounded(problems))


def joined(problems: Iterable[str], separator: str = "; ") -> str:
    """The problems on one line, bounded (see `bounded`)."""
    return separator.join(bounded(problems))


def show(value: object, limit: int = 60) -> str:
    """A value as a user wrote it (repr), cut to one short line for an error message."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a value whose repr fails is still named by its type
        text = f"<{type(value).__name__}>"
    return shorten(text, limit)


class FileProblems(ValueError):
    """A file that cannot be used, with one line per problem naming the field."""

    what = "file"

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"invalid {self.what} {shorten(source, 300)}:\n{listing(problems)}")


def validation_problems(err: ValidationError, reference: str) -> list[str]:
    """`field.path: what is wrong (and what is allowed)` for every error; `reference` names the docs."""
    problems: list[str] = []
    for e in err.errors():
        if len(problems) >= MAX_PROBLEMS:  # only the first are listed (`bounded`): the rest are named, not explained
            problems.append(f"{'.'.join(map(str, e['loc'])) or '(top level)'}: {e['msg']}")
            continue
        loc = ".".join(shorten(str(p), 60) for p in e["loc"])
        msg = shorten(e["msg"].removeprefix("Value error, "), 400)
        if e["type"] == "extra_forbidden":
            msg = f"unknown field (check the spelling; see {reference})"
        elif e["type"] == "missing":
            msg = "required field is missing"
        elif e["type"] in ("literal_error", "union_tag_invalid") and not isinstance(e.get("input"), dict):
            msg = f"{msg} (got {show(e.get('input'))})"
        if _NAMES_FIELD.match(msg) and (not loc or msg.startswith(f"{loc}.")):
            problems.append(msg)  # a check across fields names the field itself, more precisely than its loc
        else:
            problems.append(f"{loc or '(top level)'}: {msg}")
    return problems


def payload_problems(err: ValidationError, model: type[BaseModel] | None = None) -> list[str]:
    """One line per problem of an update payload or workflow input, naming the field and what was expected.

    With `model`, an unknown field suggests the closest known one: "unknown field 'approved_by'; expected
    'approver'"."""
    fields = sorted(model.model_fields) if model is not None else []
    out: list[str] = []
    for e in err.errors():
        if len(out) >= MAX_PROBLEMS:  # only the first are listed (`bounded`): the rest are named, not explained
            out.append(f"{'.'.join(map(str, e['loc'])) or '(payload)'}: {e['msg']}")
            continue
        loc = [str(p) for p in e["loc"]]
        field = ".".join(loc) or "(payload)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "missing":
            msg = "required field is missing"
        elif e["type"] == "extra_forbidden":
            close = difflib.get_close_matches(loc[-1], fields, n=1, cutoff=0.5) if loc and len(loc) == 1 else []
            msg = f"unknown field; expected {close[0]!r}" if close else (
                f"unknown field; fields are {', '.join(repr(f) for f in fields)}" if fields else "unknown field")
            out.append(f"unknown field {loc[-1]!r}" + msg.removeprefix("unknown field"))
            continue
        elif e["type"] in ("model_type", "dict_type", "model_attributes_type"):
            shape = ", ".join(f'"{f}": ...' for f in fields)
            out.append(f"expected a JSON object{f' like {{{shape}}}' if shape else ''}, got {type(e.get('input')).__name__}")
            continue
        out.append(f"{field}: {msg}")
    return out
