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
    "workflows": {"common", "canary", "activities"},  # an adapter's model a workflow needs belongs in common
    "worker": {"common", "canary", "activities", "activities.adapters", "workflows"},
    "bifrost_cli": {"common", "canary", "activities", "activities.adapters", "workflows", "worker"},
}


# The request model and its plan come first in the flow: they may read the shared vocabulary (common, the pure
# traffic plan in common/traffic, the judge's settings in canary) but nothing that runs a rollout.
REQUEST_MODULES = {"workflows.request", "workflows.plan", "workflows.windows"}  # and the modules of the request package
REQUEST_MAY_IMPORT = {"common", "canary"}


def _is_request(module: str) -> bool:
    return module in REQUEST_MODULES or module.startswith("workflows.request.")

# The simulated fleet is one adapter among others: only the registry that wires adapters (and the worker and
# CLI that start it) know it; real activities and workflows talk to the adapter interfaces.
SIMULATED_FLEET = ("activities.adapters.simulated", "activities.adapters.simulated_traffic",
                   "activities.adapters.simulated_router")
MAY_KNOW_THE_FLEET = {"activities.adapters.registry", *SIMULATED_FLEET}


def _is_simulated(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in SIMULATED_FLEET)


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
            elif _is_request(module) and not _is_request(target) and other not in REQUEST_MAY_IMPORT:
                wrong.append(f"{module} -> {target} (the request model may import only {sorted(REQUEST_MAY_IMPORT)})")
            elif (_is_simulated(target) and module not in MAY_KNOW_THE_FLEET
                  and layer in ("activities", "activities.adapters", "workflows")):
                wrong.append(f"{module} -> {target} (only the registry wires the simulated fleet)")
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
    assert "common.traffic.plan" in {t for t in _graph()["workflows.request.regions"]}


def test_the_checker_sees_the_request_reach_into_activities_and_activities_reach_into_the_fleet():
    """The two imports issue #18 removed: the request model on the activities' traffic plan, a real activity on
    the simulated fleet's traffic model."""
    graph = {"workflows.request": {"activities.traffic.shift", "common.traffic.plan", "canary.config"},
             "activities.traffic.shift": {"activities.adapters.simulated_traffic", "activities.adapters.registry"},
             "activities.adapters.registry": {"activities.adapters.simulated"}}
    assert sorted(_violations(graph)) == [
        "activities.traffic.shift -> activities.adapters.simulated_traffic (only the registry wires the simulated fleet)",
        "workflows.request -> activities.traffic.shift (the request model may import only ['canary', 'common'])",
    ]
    # the request package's modules are held to the same rule as the package
    assert _violations({"workflows.request.model": {"workflows.controls", "workflows.request.regions"}}) == [
        "workflows.request.model -> workflows.controls (the request model may import only ['canary', 'common'])"]
    assert "workflows.controls.lock_client" in _imports(ROOT / "workflows" / "rollout" / "workflow.py")


def test_the_checker_sees_a_workflow_reach_into_an_adapter():
    """The import removed when ArmWeights moved to common/traffic/arms.py: a workflow names activities by reference
    (through `activities`), never an adapter module, which only activities may call."""
    graph = {"workflows.stage.models": {"activities.adapters.routers.base", "common.traffic.arms"},
             "workflows.stage.steps": {"activities.routing"}}
    assert _violations(graph) == ["workflows.stage.models -> activities.adapters.routers.base"]
    assert "common.traffic.arms" in _graph()["workflows.stage.models"]
