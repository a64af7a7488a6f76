"""Which published figures describe code that has changed since: every row of the benchmarks index's table
(benchmarks/README.md: what, command, measured at, figure, details), its commit, and the code files changed between
that commit and HEAD.

    python -m tools.stale_figures [--page benchmarks/README.md] [--fresh]

A row's commit is the first commit hash in its "measured at" cell that this checkout knows; its code is the product
(ppo_core, tuner, dashboard, the CLI and pyproject.toml) and whatever its command cell names in the repository: a
``python -m benchmarks.X`` or ``tools.X`` module (its package, for a package) and the files it names (a study file).
A row whose commit has changes to that code after it is stale: its figures describe that commit, not HEAD.
``--fresh`` lists the rows that are not. Exit status 0 either way (staleness is a report, not an error); 2 for a
page with no table.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.index_table import TABLE_HEADING, table_rows
from tools.provenance import REPO_ROOT
from tools.published_figures import load_registry

HASH = re.compile(r"\b[0-9a-f]{7,40}\b")
STANDS = re.compile(r"stands through ([0-9a-f]{7,40}):\s*(.+)$")
PRODUCT = ("ppo_core", "tuner", "dashboard", "ppo_tune", "pyproject.toml")
MODULE = re.compile(r"python -m ((?:benchmarks|tools)(?:\.\w+)+)")
FILE = re.compile(r"[\w./-]+\.(?:py|yaml|sh)\b")


@dataclass(frozen=True)
class Figure:
    """One row of the table: what it measures, the commit named in its "measured at" cell (None when the cell names
    none this checkout knows), and the code files changed since that commit."""

    what: str
    commit: str | None
    changed: tuple[str, ...]
    stands: tuple[str, str] | None = None
    """(the commit a "stands through" note was checked at, its reason): ``changed`` then counts from that commit."""

    @property
    def stale(self) -> bool:
        return self.commit is None or bool(self.changed)


def git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)


def known_commit(cell: str, root: Path) -> str | None:
    """The first word of ``cell`` that names a commit of this checkout (a "stands through" note's left out)."""
    for word in HASH.findall(STANDS.sub("", cell)):
        if git(root, "cat-file", "-e", f"{word}^{{commit}}").returncode == 0:
            return word
    return None


def code_paths(command: str, root: Path) -> list[str]:
    """The code a row's command runs: the product, the modules it runs with ``python -m`` and the files it names that
    exist in the repository."""
    paths = list(PRODUCT)
    for module in MODULE.findall(command):
        as_path = module.replace(".", "/")
        paths.append(as_path if (root / as_path).is_dir() else f"{as_path}.py")
    paths += [name for name in FILE.findall(command) if (root / name).is_file()]
    return paths


def figures(page: str, root: Path = REPO_ROOT) -> list[Figure]:
    """Every row of the page's table, with its code's files changed between its commit and HEAD."""
    found = []
    for cells in table_rows(page):
        what, command, measured = [*cells, "", "", ""][:3]
        commit = known_commit(measured, root)
        note = STANDS.search(measured)
        stands = (note.group(1), note.group(2).strip()) if note and known_commit(note.group(1), root) else None
        changed: tuple[str, ...] = ()
        if commit is not None:
            since = stands[0] if stands else commit
            listed = git(root, "diff", "--name-only", since, "HEAD", "--", *code_paths(command, root)).stdout
            changed = tuple(line for line in listed.splitlines() if line)
        found.append(Figure(what, commit, changed, stands))
    return found


def quoted_rows(registry: dict[str, Any]) -> dict[str, list[str]]:
    """{index row: the README bullets that quote its results files}: a README figure's evidence is the index row
    whose registered figures read the same results file (benchmarks/figures.yaml)."""
    entries = [entry for entry in registry["figures"] if "file" in entry]
    bullets: dict[str, list[str]] = {}
    for entry in entries:
        if entry["document"] == "README.md":
            bullets.setdefault(entry["file"], []).append(entry["row"])
    rows: dict[str, list[str]] = {}
    for entry in entries:
        if entry["document"] == "benchmarks/README.md" and entry["file"] in bullets:
            quoted = rows.setdefault(entry["row"], [])
            quoted += [bullet for bullet in bullets[entry["file"]] if bullet not in quoted]
    return rows


def verdict(figure: Figure) -> str:
    """One line: stale (since which commit, what changed), standing (why) or fresh."""
    if figure.commit is None:
        return f"stale: {figure.what[:90]} (names no commit of this checkout)"
    if figure.stale:
        since = figure.stands[0] if figure.stands else figure.commit
        return f"stale: {figure.what[:90]} (since {since}: {summary(figure.changed)})"
    if figure.stands:
        return f"stands: {figure.what[:90]} (describes {figure.commit}; through {figure.stands[0]}: " \
               f"{figure.stands[1]})"
    return f"fresh: {figure.what[:90]} ({figure.commit})"


def summary(changed: tuple[str, ...]) -> str:
    """Changed files counted by top-level folder: "ppo_core 12, tuner 3"."""
    counts: dict[str, int] = {}
    for name in changed:
        top = name.split("/", 1)[0]
        counts[top] = counts.get(top, 0) + 1
    return ", ".join(f"{top} {count}" for top, count in sorted(counts.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.stale_figures", description=__doc__.split("\n\n")[0])
    parser.add_argument("--page", type=Path, default=REPO_ROOT / "benchmarks" / "README.md")
    parser.add_argument("--fresh", action="store_true",
                        help="list the rows whose code has not changed (or that stand) instead")
    parser.add_argument("--readme", action="store_true",
                        help="every row whose figures README.md quotes, fresh, standing or stale")
    args = parser.parse_args(argv)
    rows = figures(args.page.read_text(), REPO_ROOT)
    if not rows:
        print(f"stale_figures: {args.page} has no table under {TABLE_HEADING!r}", file=sys.stderr)
        return 2
    if args.readme:
        quoted = quoted_rows(load_registry())
        chosen = [row for row in rows if row.what in quoted]
        for row in chosen:
            print(f"{verdict(row)}\n  quoted by README.md: {'; '.join(quoted[row.what])}")
        counts = {word: sum(verdict(row).startswith(word) for row in chosen) for word in ("fresh", "stands", "stale")}
        print(f"README.md quotes {len(chosen)} rows: " + ", ".join(f"{n} {word}" for word, n in counts.items()))
        return 0
    chosen = [row for row in rows if row.stale != args.fresh]
    for row in chosen:
        print(verdict(row))
    print(f"{len(chosen)} of {len(rows)} figures {'fresh or standing' if args.fresh else 'stale'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
