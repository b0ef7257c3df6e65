"""Turning pydantic validation errors into one readable line per problem, naming the field."""

from __future__ import annotations

from pydantic import ValidationError


class FileProblems(ValueError):
    """A file that cannot be used, with one line per problem naming the field."""

    what = "file"

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid {self.what} {source}:\n{lines}")


def validation_problems(err: ValidationError, reference: str) -> list[str]:
    """`field.path: what is wrong (and what is allowed)` for every error; `reference` names the docs."""
    problems = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = f"unknown field (check the spelling; see {reference})"
        elif e["type"] == "missing":
            msg = "required field is missing"
        elif e["type"] in ("literal_error", "union_tag_invalid") and not isinstance(e.get("input"), dict):
            msg = f"{msg} (got {e.get('input')!r})"
        problems.append(f"{loc}: {msg}")
    return problems
