"""The worked example's report (benchmarks/own_task.py): each run read as its study reads it, the comparison paired
by seed, and the stored results what the stored studies give."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from benchmarks import own_task
from tuner.production.confidence import mean_interval

STORED = own_task.RESULTS / "own_task.json"


def test_a_run_is_read_as_its_study_reads_it() -> None:
    # Training updates carry no evaluation; the judge and the proxy are the mean of the last two evaluations, KL and
    # the signals the last evaluation's.
    rows = pd.DataFrame({
        "update": [1, 20, 21, 40],
        "eval/score": [math.nan, 0.1, math.nan, 0.3],
        "eval/judge_score": [math.nan, 0.4, math.nan, 0.6],
        "eval/kl": [math.nan, 1.0, math.nan, 2.5],
        "eval/distinct_2grams": [math.nan, 0.9, math.nan, 0.8],
        "eval/repeated_3grams": [math.nan, 0.0, math.nan, 0.02],
    })
    assert own_task.run_figures(rows) == pytest.approx(
        {"judge": 0.5, "proxy": 0.2, "kl": 2.5, "distinct_2": 0.8, "repeated_3": 0.02})


def test_the_comparison_pairs_the_seeds_both_sides_ran() -> None:
    names = (*own_task.READ, *own_task.LAST)
    first = {seed: {name: float(seed) for name in names} for seed in (1, 2, 3)}
    second = {seed: {name: 0.5 * seed for name in names} for seed in (2, 3, 4)}
    result = own_task.paired(first, second)
    assert result["seeds"] == [2, 3]
    mean, low, high = mean_interval([1.0, 1.5])
    assert result["judge"] == pytest.approx({"mean": mean, "ci_low": low, "ci_high": high, "first": 2.5,
                                             "second": 1.25})


def test_the_stored_report_is_what_the_stored_studies_give(tmp_path: Path) -> None:
    out = tmp_path / "own_task.json"
    own_task.main(["--quick", "--out", str(out)])
    now, stored = json.loads(out.read_text()), json.loads(STORED.read_text())
    provenance = ("command", "commit", "date_utc", "machine", "quick")
    assert {k: v for k, v in now.items() if k not in provenance} == \
        {k: v for k, v in stored.items() if k not in provenance}


def test_show_reads_the_judge_studys_frontier_on_its_judge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ppo_tune.cli import main

    copy = tmp_path / "study.db"
    copy.write_bytes((own_task.RESULTS / "study.db").read_bytes())
    assert main(["show", "own_task", "--storage", f"sqlite:///{copy}"]) == 0
    assert "reading of every trial's held-out judge (eval/judge_score) in KL" in capsys.readouterr().out
