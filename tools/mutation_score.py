"""Mutation score of ppo_core's math: mutmut 3 mutates each math module and runs the math tests that cover it.

    python -m tools.mutation_score [--modules ppo_core/algorithm/kl.py ...] [--jobs 2] [--out PATH]
    python -m tools.mutation_score --quick --out /tmp/mutation.json   # one module (ppo_core/algorithm/kl.py)

A mutant is a small change to one function (``<`` for ``>``, ``+`` for ``-``, a constant off by one, an argument
dropped); it is killed when one of the module's tests fails with it in place, and it survives when they all pass.
score = killed / total, per module; a mutant that survives is listed with its line and its change, to be killed by a
new test (tests/test_ppo_core/test_math_mutants.py) or shown to be equivalent (tools/README.md says which, for each).

Each module runs in a fresh work directory: a copy of ppo_core (the working tree's), of tests/conftest.py and of the
module's test files (:data:`MODULES`), with a pyproject.toml holding mutmut's settings, so nothing in the repository
is touched; mutmut then makes its own copy, ``mutants/``, and forks one test process per mutant from a process that
has already imported torch. Two adjustments to what mutmut sees, both in the work copy only:

- the tests that build a model (those using one of tests/conftest.py's fixtures, such as the trainer runs of
  tests/test_ppo_core/test_estimators.py) are deselected: they call every math function, so mutmut would run them
  for every mutant, minutes each, and the math functions have their own tests;
- mutmut skips decorated functions, so each ``@estimator("name")`` registration in ppo_core/algorithm/estimators.py
  becomes a comment (line numbers kept) and a call ``estimator("name")(function)`` at the end of the file: the same
  registry, and the estimators themselves get mutated.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tools.provenance import code_commit
from tools.quick_mode import add_quick_argument, results_path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
CORE_TESTS = "tests/test_ppo_core"
MUTANTS_TESTS = f"{CORE_TESTS}/test_math_mutants.py"
STEP_TESTS = f"{CORE_TESTS}/test_step_losses.py"
MATH_TESTS = f"{CORE_TESTS}/test_math.py"
ESTIMATOR_TESTS = f"{CORE_TESTS}/test_estimators.py"
MODULES: dict[str, tuple[str, ...]] = {
    # Each module's tests: the test files that import it, or a module built on it (masked.py is read through the
    # whitening, the losses and the estimators), and test_math_mutants.py, which covers all six. Left out:
    # test_peer_equivalence.py (it runs the peers' installed code, TRL in a subprocess, for every mutant) and the
    # files whose tests all build a model (test_trainer.py, test_evaluation.py, test_data_parallel.py).
    "ppo_core/algorithm/advantages.py": (MATH_TESTS, ESTIMATOR_TESTS, MUTANTS_TESTS),
    "ppo_core/algorithm/estimators.py": (ESTIMATOR_TESTS, MUTANTS_TESTS),
    "ppo_core/algorithm/group_advantages.py": (f"{CORE_TESTS}/test_group_advantages.py", ESTIMATOR_TESTS,
                                               MUTANTS_TESTS),
    "ppo_core/algorithm/losses.py": (MATH_TESTS, ESTIMATOR_TESTS, STEP_TESTS, MUTANTS_TESTS),
    "ppo_core/algorithm/kl.py": (MATH_TESTS, STEP_TESTS, MUTANTS_TESTS),
    "ppo_core/algorithm/masked.py": (MATH_TESTS, ESTIMATOR_TESTS, STEP_TESTS, MUTANTS_TESTS),
}
QUICK_MODULE = "ppo_core/algorithm/kl.py"
"""--quick: the smallest module (51 mutants, under a minute on 2 shared cores), through the same steps."""
KILLED = "killed"
REGISTRATION = re.compile(r"^@estimator\((?P<name>[^)]*)\)\s*$")
SELECT_PLUGIN = "mutation_select"
SELECT_PLUGIN_SOURCE = '''"""Written by tools/mutation_score.py: deselect the tests that build a model."""

MODEL_FIXTURES = {fixtures!r}


def pytest_collection_modifyitems(config, items):
    kept = [item for item in items if not MODEL_FIXTURES & set(getattr(item, "fixturenames", ()))]
    deselected = [item for item in items if item not in kept]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept
'''


@dataclass(frozen=True)
class Survivor:
    """A mutant no test killed: where it is, what it changes, and what became of it."""

    module: str
    line: int
    function: str
    mutation: str  # "before -> after", the changed line's text
    status: str  # survived, no tests, timeout, suspicious, ...
    mutant: str  # mutmut's name for it (``mutmut show NAME`` in the module's work directory)
    fate: str  # EQUIVALENT, BY_HAND or UNEXPLAINED (a test to write)
    reason: str


@dataclass(frozen=True)
class Explained:
    """A known survivor, recognised by its module, its function and a piece of its mutated line."""

    module: str
    function: str
    after: str  # a substring of the mutated line
    fate: str
    reason: str


EQUIVALENT, BY_HAND, UNEXPLAINED = "equivalent", "killed by hand", "unexplained"
ON_ANY_DEVICE = ("on a CPU the index is made there either way; PyTorch moves CPU indices to the indexed tensor's "
                 "device, so on a GPU it would cost a copy, not change a result")
VALUE_LOSS_TYPE = 'the value loss reads loss_type only as `== "bnpo"`: any other default aggregates as token_mean'
VALUE_LOSS_LENGTH = ("aggregate_loss reads max_length only under seq_mean_token_sum_norm, which the value loss never "
                     "uses")
EXPLAINED = (
    Explained("ppo_core/algorithm/advantages.py", "add_scores", "torch.arange(rewards.shape[0], device=None)",
              EQUIVALENT, ON_ANY_DEVICE),
    Explained("ppo_core/algorithm/advantages.py", "add_scores", "torch.arange(rewards.shape[0], )", EQUIVALENT,
              f"device=None, the default: {ON_ANY_DEVICE}"),
    Explained("ppo_core/algorithm/advantages.py", "add_scores", "+= scores.to(None)", EQUIVALENT,
              "`+=` casts the sum to the rewards' dtype anyway; a float64 score into float32 rewards is then rounded "
              "once (the sum) instead of twice (the score, then the sum), within one float32 ulp"),
    Explained("ppo_core/algorithm/advantages.py", "whiten_advantages",
              "masked_whiten(advantages, response_mask, total=total)", EQUIVALENT,
              "shift_mean=True is masked_whiten's default"),
    Explained("ppo_core/algorithm/advantages.py", "whiten_rewards", "shift_mean=None", EQUIVALENT,
              "masked_whiten reads shift_mean only as `if not shift_mean`, where None is False"),
    Explained("ppo_core/algorithm/estimators.py", "estimator", "ESTIMATORS[name] = None", BY_HAND,
              "estimator() runs at import, before mutmut switches a mutant on, so mutmut cannot test it; applied by "
              "hand to a copy of ppo_core it fails 9 tests of tests/test_ppo_core/test_math_mutants.py"),
    Explained("ppo_core/algorithm/group_advantages.py", "grpo_advantages", "torch.zeros_like(groups[:, :2])",
              EQUIVALENT,
              "reached only when G = 1, where groups[:, :2] is groups[:, :1]"),
    Explained("ppo_core/algorithm/group_advantages.py", "group_reward_stats", "torch.zeros(groups.shape[1])",
              EQUIVALENT,
              "reached only when G = 1, where the spread is all zeros and its mean 0 whatever its length"),
    Explained("ppo_core/algorithm/losses.py", "clipped_policy_loss",
              "torch.where(advantages <= 0, torch.min(per_token,",
              EQUIVALENT, "at A = 0 both terms of the dual clip's min are 0, and so are their gradients"),
    Explained("ppo_core/algorithm/losses.py", "clipped_value_loss", 'loss_type: LossType = "XXtoken_meanXX"',
              EQUIVALENT, VALUE_LOSS_TYPE),
    Explained("ppo_core/algorithm/losses.py", "clipped_value_loss", 'loss_type: LossType = "TOKEN_MEAN"', EQUIVALENT,
              VALUE_LOSS_TYPE),
    Explained("ppo_core/algorithm/losses.py", "clipped_value_loss", "aggregation, None, step)", EQUIVALENT,
              VALUE_LOSS_LENGTH),
    Explained("ppo_core/algorithm/losses.py", "clipped_value_loss", "aggregation, 2, step)", EQUIVALENT,
              VALUE_LOSS_LENGTH),
    Explained("ppo_core/algorithm/masked.py", "masked_whiten", "count = total(mask.sum().to(None))", EQUIVALENT,
              "dividing by the int64 count casts it to the values' dtype, which is what .to(values.dtype) did first"),
)


def explain(module: str, function: str, mutation: str) -> tuple[str, str]:
    """A survivor's fate and why, from :data:`EXPLAINED`; unexplained when it is not there."""
    after = mutation.partition(" -> ")[2]
    for known in EXPLAINED:
        if (known.module, known.function) == (module, function) and known.after in after:
            return known.fate, known.reason
    return UNEXPLAINED, ""


# --------------------------------------------------------------------------------------------------- work directory


def conftest_fixtures(conftest: Path) -> list[str]:
    """The names of the fixtures a conftest defines: functions decorated with ``pytest.fixture`` (called or not)."""
    def is_fixture(decorator: ast.expr) -> bool:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        return isinstance(target, ast.Attribute) and target.attr == "fixture"

    tree = ast.parse(conftest.read_text())
    return sorted(node.name for node in tree.body
                  if isinstance(node, ast.FunctionDef) and any(map(is_fixture, node.decorator_list)))


def lift_registrations(source: str) -> str:
    """``@estimator("x")`` over ``def f`` becomes a comment on the same line, and ``estimator("x")(f)`` is appended:
    the same registry, with ``f`` undecorated for mutmut (which leaves decorated functions alone)."""
    lines = source.splitlines()
    calls = []
    for index, line in enumerate(lines):
        match = REGISTRATION.match(line)
        if match:
            function = re.match(r"def (\w+)", lines[index + 1])
            if function is None:
                raise SystemExit(f"an @estimator registration not directly over a def: {lines[index + 1]!r}")
            lines[index] = f"# {line}  (registered at the end of the file for mutmut)"
            calls.append(f"estimator({match['name']})({function[1]})")
    return "\n".join([*lines, "", *calls]) + "\n"


def mutmut_settings(module: str, tests: tuple[str, ...]) -> str:
    """The work directory's pyproject.toml: mutmut's settings for one module, and the repository's pytest settings
    (its ``pythonpath`` left out: mutmut puts its own copy of ppo_core first on the path)."""
    def toml_list(values: list[str] | tuple[str, ...]) -> str:
        return "[" + ", ".join(json.dumps(value) for value in values) + "]"

    return "\n".join([
        "[tool.mutmut]",
        'source_paths = ["ppo_core"]',
        f"only_mutate = {toml_list([module])}",
        f"also_copy = {toml_list([SELECT_PLUGIN + '.py'])}",
        f"pytest_add_cli_args_test_selection = {toml_list(tests)}",
        f"pytest_add_cli_args = {toml_list(['-p', SELECT_PLUGIN, '-p', 'no:cacheprovider'])}",
        "",
        "[tool.pytest.ini_options]",
        "timeout = 600",
        'filterwarnings = ["ignore::optuna.exceptions.ExperimentalWarning"]',
        'markers = ["cuda: needs a CUDA GPU"]',
        "",
    ])


def prepare(work: Path, module: str, tests: tuple[str, ...]) -> None:
    """A fresh work directory for ``module``: ppo_core, tests/conftest.py, the module's tests, the settings."""
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(ROOT / "ppo_core", work / "ppo_core", ignore=shutil.ignore_patterns("__pycache__"))
    (work / "tests").mkdir()
    for test in ("tests/conftest.py", *tests):
        (work / test).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / test, work / test)
    if module == "ppo_core/algorithm/estimators.py":
        target = work / module
        target.write_text(lift_registrations(target.read_text()))
    fixtures = conftest_fixtures(ROOT / "tests" / "conftest.py")
    (work / f"{SELECT_PLUGIN}.py").write_text(SELECT_PLUGIN_SOURCE.format(fixtures=set(fixtures)))
    (work / "pyproject.toml").write_text(mutmut_settings(module, tests))


# --------------------------------------------------------------------------------------------------- mutmut


def mutmut(work: Path, *arguments: str, log: Path | None = None) -> str:
    """``python -m mutmut ARGUMENTS`` in ``work``, one thread per process; what it printed (also kept in ``log``)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONDONTWRITEBYTECODE": "1"}
    completed = subprocess.run([sys.executable, "-m", "mutmut", *arguments], cwd=work, env=env,
                               capture_output=True, text=True, check=False)
    output = completed.stdout + completed.stderr
    if log is not None:
        log.write_text(output)
    if completed.returncode != 0:
        raise SystemExit(f"mutmut {' '.join(arguments)} failed in {work} (exit {completed.returncode}):\n"
                         f"{output[-4000:]}")
    return completed.stdout


def parse_results(printed: str) -> dict[str, str]:
    """``mutmut results --all true``'s lines ``    NAME: STATUS`` as {name: status}."""
    statuses = {}
    for line in printed.splitlines():
        name, separator, status = line.strip().rpartition(": ")
        if separator and "__mutmut_" in name:
            statuses[name] = status
    return statuses


def function_of(mutant: str) -> str:
    """``ppo_core.algorithm.kl.x_kl_per_token__mutmut_3`` -> ``kl_per_token``; a method's ``xǁClassǁname`` ->
    ``Class.name``."""
    mangled = mutant.partition("__mutmut_")[0].rpartition(".")[2]
    if "ǁ" in mangled:
        _, class_name, name = mangled.split("ǁ")[-3:]
        return f"{class_name}.{name}"
    return mangled.removeprefix("x_")


def function_lines(source: str, qualified: str) -> tuple[int, int]:
    """First and last line of function ``name`` or method ``Class.name`` in ``source``."""
    *owner, name = qualified.split(".")
    body: list[ast.stmt] = ast.parse(source).body
    if owner:
        body = next(node.body for node in body if isinstance(node, ast.ClassDef) and node.name == owner[0])
    node = next(node for node in body if isinstance(node, ast.FunctionDef) and node.name == name)
    return node.lineno, node.end_lineno or node.lineno


def locate(diff: str, source: str, function: str) -> tuple[int, str]:
    """The line a mutant changes, in the module's source, and the change ("before -> after"), from ``mutmut show``'s
    unified diff of the function (whose line numbers count from the function's first line)."""
    hunk = re.search(r"^@@ -(\d+)", diff, re.MULTILINE)
    body = diff.splitlines()
    removed = [line[1:] for line in body if line.startswith("-") and not line.startswith("---")]
    added = [line[1:] for line in body if line.startswith("+") and not line.startswith("+++")]
    first, last = function_lines(source, function)
    lines = source.splitlines()
    if not removed or hunk is None:
        return first, "(no change shown)"
    context = next((i for i, line in enumerate(body) if line.startswith("@@")), 0)
    offset = next(i for i, line in enumerate(body[context + 1:]) if line.startswith("-"))
    estimate = first + int(hunk[1]) - 1 + offset
    candidates = [number for number in range(first, last + 1) if lines[number - 1].strip() == removed[0].strip()]
    line = min(candidates, key=lambda number: abs(number - estimate)) if candidates else estimate
    before = " / ".join(text.strip() for text in removed)
    after = " / ".join(text.strip() for text in added)
    return line, f"{before} -> {after}"


def survivors_of(work: Path, module: str, statuses: dict[str, str]) -> list[Survivor]:
    """Every mutant of ``module`` that was not killed, located in the source it was made from."""
    source = (work / module).read_text()  # as mutated: the working tree's when the run began (line numbers kept)
    found = []
    for mutant, status in sorted(statuses.items(), key=lambda item: mutant_order(item[0])):
        if status == KILLED:
            continue
        function = function_of(mutant)
        line, mutation = locate(mutmut(work, "show", mutant), source, function)
        found.append(Survivor(module, line, function, mutation, status, mutant, *explain(module, function, mutation)))
    return sorted(found, key=lambda survivor: (survivor.line, mutant_order(survivor.mutant)))


def mutant_order(mutant: str) -> tuple[str, int]:
    name, _, number = mutant.partition("__mutmut_")
    return name, int(number) if number.isdigit() else 0


def score_module(module: str, work_root: Path, jobs: int) -> dict[str, Any]:
    """Run mutmut over one module with its tests; its counts, score and survivors."""
    tests = MODULES[module]
    work = work_root / Path(module).stem
    commit = code_commit()  # the commit the copy below is of: HEAD may move during a long run
    prepare(work, module, tests)
    started = time.perf_counter()
    mutmut(work, "run", "--max-children", str(jobs), log=work / "mutmut-run.log")
    seconds = time.perf_counter() - started
    statuses = parse_results(mutmut(work, "results", "--all", "true"))
    if not statuses:
        raise SystemExit(f"mutmut made no mutants of {module}: see {work / 'mutmut-run.log'}")
    counts: dict[str, int] = {}
    for status in statuses.values():
        counts[status] = counts.get(status, 0) + 1
    killed = counts.get(KILLED, 0)
    survivors = survivors_of(work, module, statuses)
    return {
        "module": module,
        "code": commit,
        "tests": list(tests),
        "total": len(statuses),
        "killed": killed,
        "score": killed / len(statuses),
        "counts": counts,
        "fates": {fate: sum(survivor.fate == fate for survivor in survivors)
                  for fate in (EQUIVALENT, BY_HAND, UNEXPLAINED)},
        "survivors": [asdict(survivor) for survivor in survivors],
        "uncommitted": module_is_uncommitted(module),
        "wall_s": seconds,
    }


def module_is_uncommitted(module: str) -> bool:
    """Whether the working tree's ``module`` (what was mutated) differs from HEAD."""
    finished = subprocess.run(["git", "status", "--porcelain", "--", module], cwd=ROOT, capture_output=True,
                              text=True, check=False)
    return bool(finished.stdout.strip())


# --------------------------------------------------------------------------------------------------- report


def report(result: dict[str, Any]) -> str:
    """The score per module and the list of survivors with their fates, as Markdown tables.

    score = killed / total (by mutmut); "equivalent" survivors change nothing a caller can see, "killed by hand" ones
    are killed when applied to a copy of ppo_core (mutmut cannot test them), "unexplained" ones want a test.
    """
    rows = ["| module | killed / total | score | not killed, by status | equivalent | killed by hand | unexplained "
            "| wall s |", "|---|---:|---:|---|---:|---:|---:|---:|"]
    for row in result["modules"]:
        others = ", ".join(f"{status} {count}" for status, count in sorted(row["counts"].items())
                           if status != KILLED) or "none"
        changed = " (uncommitted changes)" if row["uncommitted"] else ""
        fates = " | ".join(str(row["fates"][fate]) for fate in (EQUIVALENT, BY_HAND, UNEXPLAINED))
        rows.append(f"| `{row['module']}`{changed} | {row['killed']} / {row['total']} | {100 * row['score']:.1f}% | "
                    f"{others} | {fates} | {row['wall_s']:.0f} |")
    total, killed = result["total"], result["killed"]
    fates = " | ".join(str(sum(row["fates"][fate] for row in result["modules"]))
                       for fate in (EQUIVALENT, BY_HAND, UNEXPLAINED))
    rows.append(f"| all | {killed} / {total} | {100 * killed / max(total, 1):.1f}% | | {fates} | |")
    survivors = [survivor for row in result["modules"] for survivor in row["survivors"]]
    lines = ["", f"Survivors: {len(survivors)}", ""]
    if survivors:
        lines += ["| module | line | function | mutation | status | fate | why |", "|---|---:|---|---|---|---|---|"]
        lines += [f"| `{s['module']}` | {s['line']} | `{s['function']}` | `{escape_pipes(s['mutation'])}` | "
                  f"{s['status']} | {s['fate']} | {escape_pipes(s['reason'])} |" for s in survivors]
    else:
        lines.append("(none)")
    moved = [f"`{row['module']}` at {row['code']}" for row in result["modules"] if row["code"] != result["code"]]
    if moved:
        lines += ["", f"HEAD moved during the run (the first module was copied at {result['code']}): "
                  + ", ".join(moved) + "."]
    return "\n".join(rows + lines)


def escape_pipes(text: str) -> str:
    """``text`` inside a Markdown table cell."""
    return text.replace("|", "\\|")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.mutation_score", description=__doc__.split("\n\n")[0])
    add_quick_argument(parser)
    parser.add_argument("--modules", nargs="+", choices=list(MODULES), default=None,
                        help="the modules to mutate (default: all six; --quick: ppo_core/algorithm/kl.py)")
    parser.add_argument("--jobs", type=int, default=2, help="mutants tested at once (mutmut's --max-children)")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="where the work copies go (kept, to look at with mutmut show; default: a temporary "
                             "directory, removed at the end)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    modules = args.modules or ([QUICK_MODULE] if args.quick else list(MODULES))
    out = results_path(args.out, RESULTS / "mutation_score" / "mutation_score.json", args.quick)
    work_root = args.work_dir or Path(tempfile.mkdtemp(prefix="ppo-mutation-"))
    try:
        rows = []
        for module in modules:
            print(f"{module}: mutating, with {', '.join(MODULES[module])}", flush=True)
            rows.append(score_module(module, work_root, args.jobs))
            print(f"{module}: {rows[-1]['killed']} / {rows[-1]['total']} killed", flush=True)
    finally:
        if args.work_dir is None:
            shutil.rmtree(work_root, ignore_errors=True)
    result = {
        "settings": {"quick": args.quick, "modules": modules, "jobs": args.jobs, "command": " ".join(
            ["python -m tools.mutation_score", *(argv if argv is not None else sys.argv[1:])])},
        "code": rows[0]["code"] if rows else code_commit(),
        "mutmut": mutmut_version(),
        "total": sum(row["total"] for row in rows),
        "killed": sum(row["killed"] for row in rows),
        "modules": rows,
    }
    result["table"] = report(result)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nMutation score at {result['code']} (mutmut {result['mutmut']}):\n")
    print(result["table"])
    print(f"\nwritten to {out}")


def mutmut_version() -> str:
    from importlib import metadata

    return metadata.version("mutmut")


if __name__ == "__main__":
    from tuner.trial.frozen_heap import run_as_process

    run_as_process(main)
