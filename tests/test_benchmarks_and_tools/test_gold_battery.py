"""``python -m benchmarks.gold_battery``: its quick mode reports every figure of the full run, each finite, and the
figures its page (benchmarks/results/gold_battery/README.md) publishes are the ones its results file holds."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.gold_battery import CEILINGS, LIST_TITLES, OUT, TASKS, UNSEEN, UNSEEN_GOAL, markdown
from ppo_core.tasks.fortunes.gamed import BATTERY_PROMPTS, GAMED

REPO = Path(__file__).resolve().parents[2]
README = REPO / "benchmarks" / "results" / "gold_battery" / "README.md"
SECTION = "## The text task's gold: gamed responses and stored samples"
GROUPS = ("companion_later", "companion_untuned", "smollm2_later", "smollm2_untuned")
DISTRIBUTION = ("samples", "mean", "q0.1", "q0.5", "q0.9", "share_zero", "share_half")


def run_quick(out: Path) -> tuple[dict[str, Any], str]:
    """``python -m benchmarks.gold_battery --quick --out <out>``, as a user starts it: its JSON and what it printed."""
    completed = subprocess.run([sys.executable, "-m", "benchmarks.gold_battery", "--quick", "--out", str(out)],
                               cwd=REPO, env=dict(os.environ), capture_output=True, text=True, check=False)
    assert completed.returncode == 0, f"gold_battery --quick failed:\n{completed.stdout[-3000:]}\n" \
                                      f"{completed.stderr[-5000:]}"
    return json.loads(out.read_text()), completed.stdout


def assert_finite(where: dict[str, Any], keys: tuple[str, ...] | list[str], context: str) -> None:
    missing = [key for key in keys if key not in where]
    assert not missing, f"{context}: no {missing}"
    bad = {key: where[key] for key in keys if isinstance(where[key], bool)
           or not isinstance(where[key], (int, float)) or not math.isfinite(where[key])}
    assert not bad, f"{context}: not finite: {bad}"


@pytest.mark.heavy
def test_quick_mode_reports_every_figure_finite(tmp_path: Path) -> None:
    result, printed = run_quick(tmp_path / "gold_battery.json")
    assert result["quick"] and result["command"].endswith("--quick --out " + str(tmp_path / "gold_battery.json"))
    assert result["code"] and result["machine"]["cpu"]
    above = [f"above_{c}" for c in CEILINGS]
    assert list(result["versions"]) == [str(version) for version in TASKS]
    for name, version in result["versions"].items():
        battery = version["battery"]
        assert battery["kinds"] and set(battery["kinds"]) <= set(GAMED)
        for kind, figures in battery["kinds"].items():
            assert_finite(figures, ["responses", "max", "mean", *above], f"v{name} {kind}")
        assert_finite(battery, ["responses", "max", *above], f"v{name} battery")
        assert list(version["unseen"]) == list(UNSEEN)
        for name_of_battery, figures in version["unseen"].items():
            assert figures["responses"] >= 40, name_of_battery
            assert figures["above_goal"] == len(figures["through"])
            assert all(through["gold"] > UNSEEN_GOAL for through in figures["through"])
        fluent = version["fluent"]
        for sentiment in ("positive", "neutral", "negative"):
            assert len(fluent["scores"][sentiment]) == len(BATTERY_PROMPTS)
            assert all(math.isfinite(score) for score in fluent["scores"][sentiment])
        assert fluent["order_holds_everywhere"] == all(fluent["order_holds"])
        assert_finite(version["real_text"], ["texts", "fluent_share", "mean_fluency", "shuffled_above_goal"],
                      f"v{name} real text")
        assert version["real_text"]["texts"] > 0
        # The quick run thins every source evenly, so each policy's untuned and later samples are there.
        assert tuple(version["stored"]) == GROUPS
        for group, figures in version["stored"].items():
            assert_finite(figures, list(DISTRIBUTION), f"v{name} {group}")
        assert_finite(version["speed"], ["responses", "responses_per_s"], f"v{name} speed")
    stored = result["stored"]
    assert stored["distinct_samples"] > 0
    assert_finite(stored, ["stored_gold_max_difference_from_v1"], "stored")
    for key in LIST_TITLES:
        assert stored[key], key
        for sample in stored[key]:
            assert sample["prompt"] and sample["response"]
            assert_finite(sample, [f"gold_v{n}" for n in TASKS], key)
            assert_finite(sample, ["update"], key)
    assert markdown(result) in printed


def readme_section() -> str:
    text = README.read_text()
    assert SECTION in text, f"benchmarks/results/gold_battery/README.md has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1]
    return section.split("\n## ", 1)[0]


def test_the_readme_section_shows_the_results_files_figures() -> None:
    result = json.loads(OUT.read_text())
    assert not result["quick"]
    section = readme_section()
    assert f"`{result['command']}`" in section and f"`{result['code']}`" in section
    # Every table row the section shows is a row the benchmark prints from its results file, and the headline rows
    # (the battery's highest scores, real text's fluency, the stored samples' spread) are among them.
    printed = set(markdown(result).splitlines())
    shown = [line for line in section.splitlines() if line.startswith("|")]
    assert shown and not [line for line in shown if line not in printed]
    golds = tuple(f"| v{version} |" for version in TASKS)
    headline = [line for line in printed if line.startswith(("| **all** |", *golds, "| smollm2_"))]
    # One battery row, one real-text row per gold, and each gold's row for SmolLM2's untuned and later samples.
    assert len(headline) == 1 + 3 * len(TASKS) and not [line for line in headline if line not in shown]
