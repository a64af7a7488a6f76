"""benchmarks.table_landscape: a curve table's landscape at every evaluation, and its quick mode end to end."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.table_landscape import eval_points
from tuner.search.kl_model import log10_step_mass

REPO = Path(__file__).resolve().parents[2]


def test_an_evaluation_sits_at_the_step_mass_of_the_updates_run_so_far() -> None:
    base = {"total_episodes": 256, "per_device_train_batch_size": 16, "num_mini_batches": 2, "num_ppo_epochs": 3}
    params = {"learning_rate": 1e-4}
    row = {"params": params, "evals": [{"update": 4, "eval/gold_score": 0.5, "eval/kl": 1.0},
                                       {"update": 16, "eval/gold_score": 0.6, "eval/kl": 3.0},
                                       {"update": 8, "eval/gold_score": math.nan, "eval/kl": 2.0}]}
    early, last = eval_points(row, base)  # the NaN evaluation is left out
    assert last.log10_mass == pytest.approx(log10_step_mass(params, base))  # 16 updates: the whole run
    assert early.log10_mass == pytest.approx(math.log10(1e-4 * 4 * 3 * 2))
    assert (early.kl, early.gold) == (1.0, 0.5)


def test_the_quick_landscape_reports_every_figure_and_refuses_a_missing_table(tmp_path: Path) -> None:
    out = tmp_path / "landscape.json"
    table = REPO / "benchmarks" / "results" / "curve_tables" / "curve_table.jsonl"
    done = subprocess.run([sys.executable, "-m", "benchmarks.table_landscape", "--table", str(table), "--quick",
                           "--out", str(out)], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["quick"] and result["rows"] == 40 and result["points"] > 40 and result["code"]
    assert 0 < result["r2_log_kl_on_mass"] <= 1 and 0 < result["r2_gold_on_mass_quadratic"] <= 1
    assert sum(b["n"] for b in result["gold_by_kl"]) == result["points"]
    assert "| curve_table.jsonl | 40 |" in done.stdout
    missing = subprocess.run([sys.executable, "-m", "benchmarks.table_landscape", "--quick", "--table",
                              str(tmp_path / "none.jsonl")], cwd=REPO, capture_output=True, text=True, check=False)
    assert missing.returncode == 2 and missing.stderr.strip().splitlines() == [
        f"--table: no such file: {tmp_path / 'none.jsonl'}"]
