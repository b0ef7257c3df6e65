"""Every failure type Bifrost raises is in common/failures.py's one table, and the lists derived from it cover them.

Issue #18 item 4: `OWN_TYPES` was a hand-written list that missed `ReportError`, so a report failure reached
people as "ReportError: ..." while every other adapter error read as its own line.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from activities.adapters.base import AdapterError
from activities.errors import as_application_error, error_text
from common import failures
from common.failures import ADAPTER_ERROR_KINDS, FAILURE_TYPES, NON_RETRYABLE, OWN_LINE_TYPES, USER_FACING_FAILURE_TYPES

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["common", "canary", "activities", "workflows", "worker", "bifrost_cli"]


def _import_everything() -> list[str]:
    names = []
    for pkg in PACKAGES:
        module = importlib.import_module(pkg)
        for info in pkgutil.walk_packages(module.__path__, f"{pkg}."):
            importlib.import_module(info.name)
            names.append(info.name)
    return names


def _tree(cls: type[AdapterError]) -> list[type[AdapterError]]:
    return [cls, *(c for sub in cls.__subclasses__() for c in _tree(sub))]


def test_every_adapter_error_class_leaves_as_a_type_of_the_table_and_reads_as_its_own_line():
    _import_everything()  # subclasses defined anywhere (route53's ChangeBatchRefused, ...) are then known
    classes = _tree(AdapterError)
    assert {c.__name__ for c in classes} >= {"AdapterError", "DeployError", "MetricsError", "TrafficError", "NotifyError",
                                            "ReportError", "ChangeBatchRefused"}
    for cls in classes:
        failure = as_application_error(cls("store report r1: disk full", hint="free space"))
        assert failure.type in ADAPTER_ERROR_KINDS and failure.type in OWN_LINE_TYPES, cls
        assert error_text(failure) == "store report r1: disk full — free space", cls  # no "ReportError: " prefix
    assert {c.kind for c in classes} == ADAPTER_ERROR_KINDS  # and every kind in the table has its class


def _values(expr: ast.expr, module_name: str) -> list[object]:
    """The failure types an expression can give: a literal, a module-level name, a table's values, either branch."""
    if isinstance(expr, ast.Constant):
        return [expr.value]
    if isinstance(expr, ast.Name):
        return [getattr(importlib.import_module(module_name), expr.id)]
    if isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Name):
        return list(getattr(importlib.import_module(module_name), expr.value.id).values())
    if isinstance(expr, ast.IfExp):
        return _values(expr.body, module_name) + _values(expr.orelse, module_name)
    return [ast.unparse(expr)]


def _raised_types() -> list[tuple[str, object]]:
    """Every `type=` given to an ApplicationError in Bifrost's source, resolved to its value where it is a name."""
    found: list[tuple[str, object]] = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            module_name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ApplicationError"):
                    continue
                for kw in node.keywords:
                    if kw.arg != "type":
                        continue
                    where = f"{path.relative_to(ROOT)}:{node.lineno}"
                    found.extend((where, t) for t in _values(kw.value, module_name))
    return found


def test_every_type_bifrost_raises_is_in_the_table():
    raised = _raised_types()
    assert len(raised) >= 10
    # the only computed types: an adapter error's kind, and a foreign exception's own name when its text was redacted
    computed = {"err.kind", "type(err).__name__"}
    missing = [(where, t) for where, t in raised if t not in FAILURE_TYPES and t not in computed]
    assert missing == [], "add these failure types to common/failures.py's FAILURE_TYPES: " + repr(missing)
    assert sorted(t for _, t in raised if t in computed) == ["err.kind", "type(err).__name__"]


def test_the_derived_lists():
    assert set(NON_RETRYABLE) == {"InvalidRequest", "TrafficConflict"}
    assert len(NON_RETRYABLE) == len(set(NON_RETRYABLE))  # nothing copied twice
    assert {"RolledBack", "Rejected", "Aborted", "Failed", "Refused", "InvalidPayload", "InvalidRequest",
            "EvacuationFailed"} == USER_FACING_FAILURE_TYPES
    assert ADAPTER_ERROR_KINDS == {"AdapterError", "DeployError", "MetricsError", "TrafficError", "NotifyError", "ReportError"}
    assert OWN_LINE_TYPES == ADAPTER_ERROR_KINDS | {"InvalidRequest"}
    from common import types

    assert types.USER_FACING_FAILURE_TYPES is failures.USER_FACING_FAILURE_TYPES  # one table, re-exported


@pytest.mark.parametrize("kind, shown", [
    ("ReportError", "cannot write report r1"),
    ("InvalidRequest", "cannot write report r1"),
    ("TrafficConflict", "TrafficConflict: cannot write report r1"),  # not its own line: the type says what happened
])
def test_error_text_follows_the_table(kind: str, shown: str):
    assert error_text(ApplicationError("cannot write report r1", type=kind)) == shown
