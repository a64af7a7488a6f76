"""Every published figure tied to its results file: benchmarks/figures.yaml names, for each number printed in
README.md's results section and in the figure column of the benchmarks index, the results file it comes from, the
expression that reads it and its printed precision.

    python -m tools.published_figures          # each figure that differs from its file, and each number no entry covers

A number is checked where it is printed in a *figure*: the figure column of the index's table (the command, the commit,
the day and the machine are the other columns) and the bullets of README.md's "Measured results" section. Code
spans, link targets, commit hashes and dates are not figures. A row whose figures have no results file is listed in
the registry with the reason, and its numbers are left out by name, not by omission.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from scipy import stats  # type: ignore[import-untyped]

from tools.index_table import table_rows
from tools.provenance import REPO_ROOT

REGISTRY = REPO_ROOT / "benchmarks" / "figures.yaml"
INDEX = "benchmarks/README.md"
README = "README.md"
README_SECTION = "## Measured results"
FIGURE_COLUMN = 3
NUMBER = re.compile(r"(?<![\w.])[+\-−]?\d(?:\d|,(?=\d{3}\b))*(?:\.\d+)?(?:e[+\-]?\d+)?")
NOT_FIGURES = (re.compile(r"`[^`]*`"), re.compile(r"\]\([^)]*\)"), re.compile(r"\b(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b"),
               re.compile(r"\b\d{4}-\d{2}-\d{2}\b"), re.compile(r"\b(?:95|99)% (?=\[)"),
               re.compile(r"\b\d+(?:\.\d+)?M\b"),
               re.compile(r"(?<![\w.+\-−])\d(?:x\b)?(?![\w.]|,\d{3})"))
"""Code spans (commands, paths), link targets, commit hashes, dates, an interval's level, a model's size in parameters
("0.1M") and a lone digit: the name or count of a seed, a task seed, a look, a round or a horizon ("4x")."""


def numbers(text: str) -> list[str]:
    """The numbers a figure prints, minus signs as ASCII, with code spans, link targets, commit hashes and dates
    removed first."""
    for pattern in NOT_FIGURES:
        text = pattern.sub(" ", text)
    return [found.replace("−", "-") for found in NUMBER.findall(text)]


def figure_rows(document: str, text: str) -> dict[str, str]:
    """Each published row's figure text by its name: the index's figure column by its "what" cell, README's results
    bullets by their bold name."""
    if document == INDEX:
        return {cells[0]: cells[FIGURE_COLUMN] for cells in table_rows(text) if len(cells) > FIGURE_COLUMN}
    if README_SECTION not in text:
        return {}
    section = text.split(README_SECTION, 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for bullet in re.split(r"\n(?=- )", section):
        named = re.match(r"- \*\*(.+?)\*\*", bullet.strip())
        if named:
            rows[named.group(1)] = " ".join(bullet.strip()[named.end():].split())  # the name is not a figure
    return rows


def interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean and its two-sided t interval, ``mean -/+ t_{n-1, (1+level)/2} s / sqrt(n)``."""
    mean = statistics.fmean(values)
    half = stats.t.ppf((1 + level) / 2, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def one_sided_p(differences: Sequence[float]) -> float:
    """The one-sided p of a paired t test that the mean difference is above zero."""
    return float(stats.ttest_1samp(differences, 0.0, alternative="greater").pvalue)


def paired(first: Sequence[float], second: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """The paired interval of ``first - second``, seed by seed."""
    return interval([a - b for a, b in zip(first, second, strict=True)], level)


def read(path: Path) -> Any:
    """A results file: JSON, or JSONL as a list of records."""
    text = path.read_text()
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return json.loads(text)


EVAL_NAMES = {"interval": interval, "paired": paired, "one_sided_p": one_sided_p, "median": statistics.median,
              "mean": statistics.fmean, "abs": abs, "len": len, "max": max, "min": min, "sum": sum, "sorted": sorted,
              "round": round, "list": list, "zip": zip}
"""What a registry expression may call besides reading ``r``."""


@dataclass(frozen=True)
class Check:
    document: str
    row: str
    printed: str
    computed: str | None
    problem: str | None


def printed_value(expression: str, data: Any, form: str) -> str:
    """The expression, evaluated over the results file ``r``, in the printed form ``form`` (a format spec)."""
    value = eval(expression, {"__builtins__": {}, **EVAL_NAMES, "r": data})  # the registry's own expressions
    return format(value, form).replace("−", "-")


def check(registry: dict[str, Any], root: Path = REPO_ROOT) -> list[Check]:
    """Every registry figure against its file and its document, and every number of a published row that no entry
    covers."""
    texts = {name: (root / name).read_text() for name in (INDEX, README)}
    rows = {name: figure_rows(name, text) for name, text in texts.items()}
    found: list[Check] = []
    covered: dict[tuple[str, str], list[str]] = {}
    for entry in registry["figures"]:
        document, row = entry["document"], entry["row"]
        shown = rows[document].get(row)
        if shown is None:
            found.append(Check(document, row, "", None, "no such row"))
            continue
        if "no_results_file" in entry:
            covered[(document, row)] = numbers(shown)
            continue
        data = read(root / entry["file"])
        for printed, expression, *form in entry["values"]:
            covered.setdefault((document, row), []).append(printed)
            try:
                computed = printed_value(expression, data, form[0] if form else entry["format"])
            except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError) as error:
                found.append(Check(document, row, printed, None, f"{entry['file']}: {error!r}"))
                continue
            problem = None
            if computed != printed:
                problem = f"the file gives {computed}"
            elif printed not in numbers(shown):
                problem = "not printed in the row"
            found.append(Check(document, row, printed, computed, problem))
    for document, named in rows.items():
        for row, shown in named.items():
            loose = [number for number in numbers(shown) if number not in covered.get((document, row), [])]
            if loose:
                found.append(Check(document, row, ", ".join(loose), None, "no registry entry"))
    return found


def load_registry(path: Path = REGISTRY) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def main(argv: list[str] | None = None) -> int:
    problems = [item for item in check(load_registry()) if item.problem]
    for item in problems:
        print(f"{item.document}: {item.row[:70]}: {item.printed}: {item.problem}")
    print(f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
