"""The layout's rules, read from the source: imports go ppo_tune -> dashboard -> tuner -> ppo_core, never back,
and no two modules of one part import each other, directly or around a longer loop (function-level imports count).
benchmarks/ and tools/ sit above them all: they import the product, never the other way. Inside benchmarks/, an
entry point is a top-level module or a subpackage's ``__main__`` (or a ``*_process`` module that another entry point
starts as a process), and helpers never import one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Each part may import the parts after it in this list, never those before it.
LAYERS = ("ppo_tune", "dashboard", "tuner", "ppo_core")
# Not the product: they may import it, and it never imports them.
OUTSIDE = ("benchmarks", "tools")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules(parts: tuple[str, ...] = LAYERS) -> dict[str, Path]:
    return {module_name(path): path for part in parts for path in sorted((ROOT / part).rglob("*.py"))}


def imported_modules(path: Path, modules: dict[str, Path]) -> set[str]:
    """Project modules that ``path`` imports anywhere in its body; ``from package import module`` names the module."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name in modules}


def import_graph(parts: tuple[str, ...] = LAYERS) -> dict[str, set[str]]:
    modules = project_modules(parts)
    return {name: imported_modules(path, modules) - {name} for name, path in modules.items()}


def test_graph_sees_the_whole_project() -> None:
    graph = import_graph()
    # Guards the test itself: a parser that found nothing would pass every rule below.
    assert {"ppo_tune.cli", "tuner.cli", "ppo_core.run.trainer", "dashboard.app"} <= set(graph)
    assert "tuner.search.space" in graph["tuner.study.study_file"]


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


# tuner's wings, lowest first: a module of one imports only its own wing and those before it here. tuner.cli (the
# commands, a package) and tuner's __init__ (its public names) sit above them all.
TUNER_WINGS = ("store", "exports", "search", "trl_trial", "study", "trial", "population", "run", "production")


def tuner_wing(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "tuner" and len(parts) > 1 and parts[1] in TUNER_WINGS else None


def test_tuner_is_in_wings_whose_imports_point_down() -> None:
    flat = sorted(module for module in project_modules(("tuner",))
                  if module != "tuner" and module.split(".")[:2] != ["tuner", "cli"] and tuner_wing(module) is None)
    assert not flat, flat  # every module of tuner sits in a wing
    graph = import_graph()
    assert {tuner_wing(target) for target in graph["tuner.run.worker"]} >= {"store", "study", "trial"}  # sees them
    wrong = sorted(
        f"{module} imports {target}" for module, targets in graph.items() if (wing := tuner_wing(module))
        for target in targets if (other := tuner_wing(target)) and TUNER_WINGS.index(other) > TUNER_WINGS.index(wing)
    )
    assert not wrong, wrong


# ppo_core's wings, lowest first: a module of one imports only its own wing and those before it here. Below them all sit
# the names every wing shares (errors, metric names); above them all the package's face and the ``train`` command.
PPO_CORE_WINGS = ("config", "models", "rewards", "tasks", "setup", "rollout", "algorithm", "memory", "run")
PPO_CORE_SHARED = ("ppo_core.errors", "ppo_core.metric_names")
PPO_CORE_ABOVE = ("ppo_core", "ppo_core.cli")
# The task catalogue: the built-in tasks' names and build parameters, torch-free. A config is checked against it
# (config.rules) and a run's models are resolved with it (models.paths), so it ranks with the config wing, whose
# checks are all it imports; the tasks' builds, which train models, sit in the tasks wing proper.
TASK_CATALOGUE = ("ppo_core.tasks.variants", "ppo_core.tasks.params", "ppo_core.tasks.graph.params",
                  "ppo_core.tasks.fortunes.params", "ppo_core.tasks.fortunes.extra")


def ppo_core_rank(module: str) -> int | None:
    """Where ``module`` sits in ppo_core: -1 below the wings, the wing's index, one past the last wing above them;
    None for a module outside every wing."""
    parts = module.split(".")
    if module in TASK_CATALOGUE:
        return PPO_CORE_WINGS.index("config")
    if module in PPO_CORE_SHARED:
        return -1
    if module in PPO_CORE_ABOVE:
        return len(PPO_CORE_WINGS)
    return PPO_CORE_WINGS.index(parts[1]) if parts[0] == "ppo_core" and len(parts) > 1 and \
        parts[1] in PPO_CORE_WINGS else None


def test_ppo_core_is_in_wings_whose_imports_point_down() -> None:
    modules = project_modules(("ppo_core",))
    flat = sorted(module for module in modules if ppo_core_rank(module) is None)
    assert not flat, flat  # every module of ppo_core sits in a wing, or is named above
    top = sorted(module for module in modules if len(module.split(".")) == 2 and modules[module].name != "__init__.py")
    assert len(top) <= 12, top  # the top level is a few shared names and entry points; the rest lives in wings
    graph = import_graph()
    assert {"ppo_core.setup.run_setup", "ppo_core.algorithm.update"} <= graph["ppo_core.run.trainer"]  # sees them
    wrong = sorted(
        f"{module} imports {target}" for module, targets in graph.items() if (rank := ppo_core_rank(module)) is not None
        for target in targets if (other := ppo_core_rank(target)) is not None and other > rank
    )
    assert not wrong, wrong


def module_is_package_of(module: str, target: str) -> bool:
    return target.startswith(module + ".")


def runs_as_a_program(path: Path) -> bool:
    """Whether the module has an ``if __name__ == "__main__":`` block."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and \
                isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__":
            return True
    return path.name == "__main__.py"


def is_entry_point_name(module: str) -> bool:
    """Named as an entry point: ``benchmarks.X``, a subpackage's ``__main__``, or a ``*_process`` module."""
    parts = module.split(".")
    return len(parts) == 2 or parts[-1] == "__main__" or parts[-1].endswith("_process")


def test_the_product_never_imports_benchmarks_or_tools() -> None:
    graph = import_graph(LAYERS + OUTSIDE)
    wrong = sorted(f"{module} imports {target}" for module, targets in graph.items()
                   if module.split(".")[0] in LAYERS for target in targets if target.split(".")[0] in OUTSIDE)
    assert {"benchmarks.replay.__main__", "tools.quick_mode", "tools.mutation_score"} <= set(graph)
    assert not wrong, wrong


def test_benchmark_entry_points_are_named_as_such() -> None:
    modules = {name: path for name, path in project_modules(("benchmarks",)).items() if name != "benchmarks"}
    programs = {name for name, path in modules.items() if runs_as_a_program(path)}
    assert {"benchmarks.trl_comparison.__main__", "benchmarks.tuning_quality"} <= programs
    misnamed = sorted(name for name in programs if not is_entry_point_name(name))
    assert not misnamed, f"runnable, but not where an entry point sits: {misnamed}"
    # The top of benchmarks/ holds entry points only; helpers live in the subpackages.
    idle = sorted(name for name, path in modules.items()
                  if len(name.split(".")) == 2 and path.name != "__init__.py" and name not in programs)
    assert not idle, f"not entry points, yet at the top of benchmarks/: {idle}"


def test_benchmark_helpers_import_no_entry_point() -> None:
    graph = import_graph(("benchmarks",))
    helpers = {name for name in graph if len(name.split(".")) > 2 and not is_entry_point_name(name)}
    assert "benchmarks.replay.table" in helpers and "benchmarks.common.machine" in helpers
    wrong = sorted(f"{helper} imports {target}" for helper in helpers for target in graph[helper]
                   if is_entry_point_name(target) and not module_is_package_of(target, helper))
    assert not wrong, wrong
    # What every benchmark shares depends on no one benchmark.
    shared = sorted(f"{module} imports {target}" for module, targets in graph.items()
                    if module.startswith("benchmarks.common") for target in targets
                    if not target.startswith("benchmarks.common"))
    assert not shared, shared


def test_tools_import_no_benchmark() -> None:
    # Benchmarks build on tools (tiny models, the quick mode's rule, a figure's commit), never the other way.
    graph = import_graph(OUTSIDE)
    assert "benchmarks.common.machine" in graph["benchmarks.trl_comparison.__main__"]
    wrong = sorted(f"{module} imports {target}" for module, targets in graph.items()
                   if module.startswith("tools") for target in targets if target.startswith("benchmarks"))
    assert not wrong, wrong


def test_no_import_loops_in_benchmarks_or_tools() -> None:
    graph = import_graph(OUTSIDE)
    inside = {module: {t for t in targets if not module_is_package_of(module, t)} for module, targets in graph.items()}
    loops = [sorted(group) for group in strongly_connected(inside) if len(group) > 1]
    assert not loops, loops


LONGEST_FUNCTION = 80
"""Lines a function may span: past it, it does several jobs that would read better as named steps."""


def test_no_function_is_longer_than_a_screen() -> None:
    long = sorted(
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in project_modules(LAYERS + OUTSIDE).values()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > LONGEST_FUNCTION
    )
    assert not long, long
