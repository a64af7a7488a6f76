"""tools.stale_figures, on a git checkout of its own: a figure is stale when the code its row runs changed after the
commit it names, and fresh otherwise."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tools.index_table import TABLE_HEADING, table_rows
from tools.stale_figures import figures, main, quoted_rows, verdict


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True,
                          capture_output=True, text=True).stdout.strip()


def commit_all(root: Path, message: str) -> str:
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", message)
    return git(root, "rev-parse", "--short", "HEAD")


def page(rows: list[tuple[str, str, str]]) -> str:
    body = "\n".join(f"| {what} | {command} | {measured} | 0.5 [0.4, 0.6] | [data](results/x/x.json) |"
                     for what, command, measured in rows)
    return f"# Benchmarks\n\n{TABLE_HEADING}\n\nText.\n\n| what | command | measured at | figure | details |\n" \
           f"|---|---|---|---|---|\n{body}\n\n## Next section\n\n| not | this | table |\n"


def test_a_row_is_stale_when_the_code_it_runs_changed_after_its_commit(tmp_path: Path) -> None:
    for name, text in {"ppo_core/core.py": "x = 1\n", "benchmarks/speed.py": "y = 1\n",
                       "benchmarks/other.py": "z = 1\n", "notes.md": "n\n"}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    git(tmp_path, "init", "-q")
    first = commit_all(tmp_path, "first")
    (tmp_path / "benchmarks/other.py").write_text("z = 2\n")  # another benchmark's code: not this row's
    (tmp_path / "notes.md").write_text("changed\n")
    second = commit_all(tmp_path, "second")
    (tmp_path / "benchmarks/speed.py").write_text("y = 2\n")
    third = commit_all(tmp_path, "third")
    rows = [("speed at first", "`python -m benchmarks.speed`", f"{first}, 2026-11-27"),
            ("speed at second", "`python -m benchmarks.speed`", f"at {second} on a Xeon"),
            ("speed at head", "`python -m benchmarks.speed`", f"{third}, 2026-11-27"),
            ("other at first", "`python -m benchmarks.other`", f"{first}"),
            ("unknown commit", "`python -m benchmarks.speed`", "abcdef1, 2026-11-20")]
    found = {figure.what: figure for figure in figures(page(rows), tmp_path)}
    assert len(table_rows(page(rows))) == 5  # the header, the rule and the next section's table left out
    assert found["speed at first"].stale and found["speed at first"].changed == ("benchmarks/speed.py",)
    assert found["speed at second"].stale
    assert not found["speed at head"].stale
    assert found["other at first"].changed == ("benchmarks/other.py",)  # its own module, not speed.py or notes
    assert found["unknown commit"].commit is None and found["unknown commit"].stale
    (tmp_path / "ppo_core/core.py").write_text("x = 2\n")  # the product: every row's code
    commit_all(tmp_path, "fourth")
    assert all(figure.stale for figure in figures(page(rows), tmp_path))


def test_a_page_without_the_table_exits_2(tmp_path: Path) -> None:
    empty = tmp_path / "README.md"
    empty.write_text("# Nothing measured\n")
    assert main(["--page", str(empty)]) == 2


def test_a_row_that_stands_through_a_later_commit_counts_changes_from_there(tmp_path: Path) -> None:
    (tmp_path / "ppo_core").mkdir()
    (tmp_path / "ppo_core/core.py").write_text("x = 1\n")
    git(tmp_path, "init", "-q")
    measured = commit_all(tmp_path, "measured")
    (tmp_path / "ppo_core/core.py").write_text("x = 2\n")  # a refactor that a check found leaves the runs alike
    checked = commit_all(tmp_path, "checked")
    note = f"{measured}, 2026-11-28; stands through {checked}: the runs are the same at both commits"
    rows = [("standing", "`python -m benchmarks.speed`", note),
            ("plain", "`python -m benchmarks.speed`", f"{measured}, 2026-11-28")]
    found = {figure.what: figure for figure in figures(page(rows), tmp_path)}
    assert found["standing"].commit == measured  # the commit it describes, not the one it was checked through
    assert found["standing"].stands == (checked, "the runs are the same at both commits")
    assert not found["standing"].stale and found["plain"].stale
    assert verdict(found["standing"]).startswith(f"stands: standing (describes {measured}; through {checked}: ")
    (tmp_path / "ppo_core/core.py").write_text("x = 3\n")  # a change after the check: stale again
    commit_all(tmp_path, "after")
    assert figures(page(rows), tmp_path)[0].stale


def test_the_rows_readme_quotes_are_those_reading_its_results_files() -> None:
    registry = {"figures": [
        {"document": "README.md", "row": "Bullet A", "file": "a.json"},
        {"document": "README.md", "row": "Bullet B", "file": "a.json"},
        {"document": "benchmarks/README.md", "row": "row of a", "file": "a.json"},
        {"document": "benchmarks/README.md", "row": "row of b", "file": "b.json"},
        {"document": "benchmarks/README.md", "row": "row with no file", "no_results_file": "why"},
    ]}
    assert quoted_rows(registry) == {"row of a": ["Bullet A", "Bullet B"]}
