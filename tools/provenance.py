"""Which code a measured figure describes: the commit, and whether the code differed from it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
# Where a change alters what a benchmark measures; edits elsewhere (docs, tests, results) leave a figure as it was,
# the prose and results files inside those folders included: a benchmark that writes its result there, or a README
# edited while it runs, must not mark the next figure as made from other code.
CODE_PATHS = ("ppo_core", "tuner", "dashboard", "benchmarks", "tools", "studies", "pyproject.toml",
              ":(exclude)benchmarks/results", ":(exclude,glob)**/*.md")


def code_commit(root: Path = REPO_ROOT) -> str | None:
    """The commit the measured code is at, with ``+uncommitted`` when the code paths differ from it; None outside a
    git checkout. README figures name it, so a reader can tell which code they describe."""
    def git(*args: str) -> str:
        finished = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
        return finished.stdout.strip() if finished.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return None
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", *CODE_PATHS)
    return f"{commit}+uncommitted" if dirty else commit


_STARTED: dict[Path, str | None] = {}


def commit_at_start(root: Path = REPO_ROOT) -> str | None:
    """:func:`code_commit` as it was the first time this process asked about ``root``; this module asks about the
    repository as it is imported, so for a benchmark that is as it starts. A commit made, or code edited, while a
    long measurement runs then does not change which code its result says it ran."""
    if root not in _STARTED:
        _STARTED[root] = code_commit(root)
    return _STARTED[root]


def command_line(module: str, argv: Sequence[str] | None) -> str:
    """The command a result was made with, as a reader would type it: ``python -m MODULE`` and its arguments
    (``argv``, or the process's own when None, as argparse reads them)."""
    return " ".join(["python -m " + module, *(sys.argv[1:] if argv is None else argv)])


commit_at_start()  # the repository's state as the process that imports this starts
