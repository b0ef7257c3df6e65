"""The shape every workflow keeps: one package per workflow, a thin class over one file per concern.

A reader should find "where does a stage wait for approval?" or "how does the guard decide?" in one file named
for it, and a workflow class should read as a table of contents: run, handlers that delegate, queries. These
limits are counted on the syntax tree (not by grepping lines), so a long docstring counts and a comment trick
does not help.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / "workflows"

MAX_CLASS_LINES = 300
MAX_CLASS_METHODS = 30
MAX_FILE_LINES = 250
# Packages whose workflow publishes search attributes and current details: each has its `details.py`.
PUBLISHING = {"rollout", "stage", "evacuation", "guard", "revert"}


def _is_workflow_defn(node: ast.ClassDef) -> bool:
    for d in node.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if isinstance(target, ast.Attribute) and target.attr == "defn":
            return True
    return False


def _workflow_classes(path: Path) -> list[ast.ClassDef]:
    tree = ast.parse(path.read_text(), str(path))
    return [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and _is_workflow_defn(n)]


def _class_size(node: ast.ClassDef) -> tuple[int, int]:
    """(lines from the first decorator to the last line, methods directly in the body)."""
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    assert node.end_lineno is not None
    methods = sum(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in node.body)
    return node.end_lineno - first + 1, methods


def _packages() -> list[Path]:
    return sorted(p for p in WORKFLOWS.iterdir() if p.is_dir() and (p / "workflow.py").exists())


def _sources() -> list[Path]:
    return sorted(p for p in WORKFLOWS.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_workflow_class_lives_in_its_own_package_as_workflow_py() -> None:
    homes = {}
    for path in _sources():
        for cls in _workflow_classes(path):
            homes[cls.name] = path.relative_to(WORKFLOWS)
    assert homes, "no @workflow.defn class found: the checker is blind"
    misplaced = {name: str(p) for name, p in homes.items() if p.name != "workflow.py" or len(p.parts) != 2}
    assert misplaced == {}
    per_package: dict[str, list[str]] = {}
    for name, p in homes.items():
        per_package.setdefault(p.parts[0], []).append(name)
    assert {k: v for k, v in per_package.items() if len(v) > 1} == {}


@pytest.mark.parametrize("package", [p.name for p in _packages()])
def test_each_workflow_package_has_its_models_and_details(package: str) -> None:
    files = {p.name for p in (WORKFLOWS / package).glob("*.py")}
    needed = {"workflow.py", "models.py"} | ({"details.py"} if package in PUBLISHING else set())
    assert needed - files == set()


def test_the_five_publishing_workflows_are_packages() -> None:
    assert PUBLISHING <= {p.name for p in _packages()}


@pytest.mark.parametrize("package", [p.name for p in _packages()])
def test_workflow_classes_are_thin(package: str) -> None:
    for cls in _workflow_classes(WORKFLOWS / package / "workflow.py"):
        lines, methods = _class_size(cls)
        assert lines <= MAX_CLASS_LINES, f"{cls.name}: {lines} lines (limit {MAX_CLASS_LINES})"
        assert methods <= MAX_CLASS_METHODS, f"{cls.name}: {methods} methods (limit {MAX_CLASS_METHODS})"


def test_every_file_of_a_workflow_package_or_the_controls_answers_one_question() -> None:
    long = {}
    for path in _sources():
        rel = path.relative_to(WORKFLOWS)
        if len(rel.parts) < 2:
            continue  # the request model, the plan and the shared helpers at the top are not workflow parts
        n = len(path.read_text().splitlines())
        if n > MAX_FILE_LINES:
            long[str(rel)] = n
    assert long == {}


def test_no_workflow_patched_branches() -> None:
    calls = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("patched", "deprecate_patch")):
                calls.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert calls == []


def test_the_size_checker_sees_a_fat_class() -> None:
    src = "@workflow.defn\nclass Fat:\n" + "".join(f"    def m{i}(self):\n        pass\n" for i in range(31))
    cls = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.ClassDef))
    assert _is_workflow_defn(cls)
    assert _class_size(cls) == (64, 31)
