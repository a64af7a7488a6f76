"""The code and the pages say what they do, not which ticket asked for it: no line of code, tests, study files,
scripts or markdown names a tracker issue by number (the history of why lives in commit messages)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE_SUFFIXES = (".py", ".yaml", ".yml", ".toml", ".sh", ".cfg", ".md")
ISSUE_NUMBER = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)


def tracked_sources() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / name for name in listed.splitlines()
            if name.endswith(SOURCE_SUFFIXES)
            and not (name.startswith("benchmarks/results/") and not name.endswith(".md"))  # data, not prose
            and "/history/" not in name  # superseded results, kept as they were written
            and name != "tests/test_source_hygiene.py"]  # its own examples of what it looks for


def test_the_pattern_finds_an_issue_number_and_spares_ordinary_prose() -> None:
    assert ISSUE_NUMBER.search("added for Issue 50's third look") and ISSUE_NUMBER.search("see issue #7")
    assert not ISSUE_NUMBER.search("an issue with 3 seeds") and not ISSUE_NUMBER.search("the issues it found")


def test_no_source_line_names_a_tracker_issue() -> None:
    sources = tracked_sources()
    assert len(sources) > 100  # the listing found the project
    named = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}" for path in sources
             for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1)
             if ISSUE_NUMBER.search(line)]
    assert not named, "\n".join(named)
