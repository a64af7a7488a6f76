"""The layout's rules, read from the source: imports go ppo_tune -> dashboard -> tuner -> ppo_core, never back,
and no two modules of one part import each other, directly or around a longer loop (function-level imports count).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Each part may import the parts after it in this list, never those before it.
LAYERS = ("ppo_tune", "dashboard", "tuner", "ppo_core")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {module_name(path): path for layer in LAYERS for path in sorted((ROOT / layer).rglob("*.py"))}


def imported_modules(path: Path, modules: dict[str, Path]) -> set[str]:
    """Project modules that ``path`` imports anywhere in its body; ``from package import module`` names the module."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name in modules}


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imported_modules(path, modules) - {name} for name, path in modules.items()}


def test_graph_sees_the_whole_project() -> None:
    graph = import_graph()
    # Guards the test itself: a parser that found nothing would pass every rule below.
    assert {"ppo_tune.cli", "tuner.cli", "ppo_core.trainer", "dashboard.app"} <= set(graph)
    assert "tuner.search_space" in graph["tuner.study_config"]


@pytest.mark.parametrize("layer", LAYERS)
def test_imports_point_down_the_layers(layer: str) -> None:
    above = LAYERS[: LAYERS.index(layer)]
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in import_graph().items() if module.split(".")[0] == layer
        for target in targets if target.split(".")[0] in above
    )
    assert not wrong, wrong


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm: the groups of modules that reach each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            groups.append(group)

    for node in graph:
        if node not in index:
            visit(node)
    return groups


def test_strongly_connected_finds_a_loop() -> None:
    assert {"a", "b", "c"} in strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})


@pytest.mark.parametrize("layer", LAYERS)
def test_no_import_loops_inside_a_part(layer: str) -> None:
    graph = import_graph()
    # A package's __init__ re-exports its modules; those edges point down into the package, not across it.
    inside = {
        module: {t for t in targets if t.split(".")[0] == layer and not module_is_package_of(module, t)}
        for module, targets in graph.items() if module.split(".")[0] == layer
    }
    loops = [sorted(group) for group in strongly_connected(inside) if len(group) > 1]
    assert not loops, loops


def module_is_package_of(module: str, target: str) -> bool:
    return target.startswith(module + ".")
