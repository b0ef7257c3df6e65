"""The import graph keeps the design's one-way flow: request → plan → workflow → activities → adapters.

Each package may import only the layers below it, and no module imports itself back through others.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["common", "canary", "activities", "workflows", "worker", "bifrost_cli"]

# What each layer may import (besides itself). `activities.adapters` is a layer of its own, below `activities`.
ALLOWED: dict[str, set[str]] = {
    "common": set(),
    "canary": {"common"},
    "activities.adapters": {"common", "canary"},
    "activities": {"common", "canary", "activities.adapters"},
    "workflows": {"common", "canary", "activities", "activities.adapters"},
    "worker": {"common", "canary", "activities", "activities.adapters", "workflows"},
    "bifrost_cli": {"common", "canary", "activities", "activities.adapters", "workflows", "worker"},
}


def _layer(module: str) -> str | None:
    if module == "activities.adapters" or module.startswith("activities.adapters."):
        return "activities.adapters"
    top = module.split(".")[0]
    return top if top in ALLOWED else None


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every first-party module `path` imports, wherever the import statement is (functions included)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return {m for m in out if _layer(m) is not None}


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for imported in _imports(path):
            # `from pkg import module` names a module; `from module import name` names the module itself
            while imported not in modules and "." in imported:
                imported = imported.rsplit(".", 1)[0]
            if imported in modules and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


def _violations(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for module, targets in graph.items():
        layer = _layer(module)
        assert layer is not None, module
        for target in sorted(targets):
            other = _layer(target)
            if other != layer and other not in ALLOWED[layer]:
                wrong.append(f"{module} -> {target}")
    return wrong


def test_every_import_points_down_the_layers():
    wrong = _violations(_graph())
    assert wrong == [], "imports against the flow request → plan → workflow → activities → adapters:\n" + "\n".join(wrong)


def test_no_import_cycles():
    graph = _graph()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [nxt] if nxt in path else [node, nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == [], "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_checker_sees_wrong_way_imports():
    """A guard for the guard: the imports issue #8 removed would be reported."""
    graph = {"activities.lock": {"workflows.lock"}, "activities.adapters.targets": {"activities.deploy"},
             "canary.judge": {"common.types"}}
    assert sorted(_violations(graph)) == ["activities.adapters.targets -> activities.deploy", "activities.lock -> workflows.lock"]
    assert "workflows.lock" in _imports(ROOT / "workflows" / "rollout.py")
