"""What a measured figure says about the code it came from (tools.provenance), on a git checkout of its own."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tools import provenance
from tools.provenance import REPO_ROOT, code_commit, command_line, commit_at_start


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_only_a_change_to_code_marks_a_figure_uncommitted(tmp_path: Path) -> None:
    files = {"benchmarks/bench.py": "x = 1\n", "benchmarks/README.md": "# figures\n",
             "benchmarks/results/bench.json": "{}\n", "ppo_core/core.py": "y = 2\n", "notes.txt": "n\n"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "start")
    head = git(tmp_path, "rev-parse", "--short", "HEAD")
    assert code_commit(tmp_path) == head
    # A benchmark writing its result, a README edited while it ran, a file outside the code: the code is HEAD's.
    for name in ("benchmarks/README.md", "benchmarks/results/bench.json", "notes.txt"):
        (tmp_path / name).write_text("changed\n")
    assert code_commit(tmp_path) == head
    (tmp_path / "benchmarks/bench.py").write_text("x = 3\n")
    assert code_commit(tmp_path) == f"{head}+uncommitted"


def test_a_result_names_the_code_as_it_was_when_the_run_started(tmp_path: Path) -> None:
    (tmp_path / "ppo_core").mkdir()
    (tmp_path / "ppo_core/core.py").write_text("y = 2\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "start")
    head = git(tmp_path, "rev-parse", "--short", "HEAD")
    assert commit_at_start(tmp_path) == head
    (tmp_path / "ppo_core/core.py").write_text("y = 3\n")  # edited while the measurement runs
    assert code_commit(tmp_path) == f"{head}+uncommitted" and commit_at_start(tmp_path) == head
    git(tmp_path, "commit", "-q", "-am", "later")  # and committed before it writes its result
    assert code_commit(tmp_path) != head and commit_at_start(tmp_path) == head
    # The repository's own state was read as this module was imported, before any benchmark ran.
    assert REPO_ROOT in provenance._STARTED


def test_outside_a_checkout_there_is_no_commit(tmp_path: Path) -> None:
    assert code_commit(tmp_path) is None


def test_the_command_is_the_module_and_its_arguments() -> None:
    assert command_line("benchmarks.x", ["--quick", "--out", "a.json"]) == "python -m benchmarks.x --quick --out a.json"
    assert command_line("benchmarks.x", []) == "python -m benchmarks.x"


def test_a_registrations_stated_time_is_its_commits() -> None:
    # A pre-registration proves its order by its commit: a time written by hand can be later than the commit holding it
    # (one said 16:40 of a commit made at 16:12, before a result at 16:23). So a stated time is a commit's, checked.
    import re

    root = Path(__file__).resolve().parents[2]
    listed = subprocess.run(["git", "ls-files", "*.md"], cwd=root, capture_output=True, text=True, check=True).stdout
    pages = [root / name for name in listed.split() if "/history/" not in name]
    handwritten = re.compile(r"(?:[Ww]ritten|Registered(?: before any run,)?) \d{4}-\d\d-\d\d \d\d:\d\d UTC")
    stated = re.compile(r"(?:ommitted in|in) ([0-9a-f]{7,}) (?:at|\(committed) (\d{4}-\d\d-\d\d \d\d:\d\d) UTC")
    checked = 0
    for page in pages:
        text = page.read_text()
        assert not handwritten.search(text), f"{page.relative_to(root)}: {handwritten.search(text)}"
        for commit, when in stated.findall(text):
            shown = subprocess.run(["git", "show", "-s", "--format=%cd", "--date=format-local:%Y-%m-%d %H:%M", commit],
                                   cwd=root, capture_output=True, text=True, check=True, env={"TZ": "UTC"}).stdout
            assert shown.strip() == when, f"{page.relative_to(root)}: {commit} was committed at {shown.strip()}"
            checked += 1
    assert checked >= 15
