"""benchmarks.tuning_matters: a run scores the mean gold of its last evaluations, a configuration the mean over its
seeds, and the gap from the median configuration to the best is read against the pooled seed-to-seed SD."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.tuning_matters import pooled_seed_sd, run_score, summarise

REPO = Path(__file__).resolve().parents[2]


def run(config: int, seed: int, golds: list[float]) -> dict[str, object]:
    return {"config_id": config, "seed": seed,
            "evals": [{"update": 8 * (i + 1), "eval/gold_score": gold} for i, gold in enumerate(golds)]}


def test_a_run_scores_its_last_evaluations_and_a_run_without_any_is_left_out() -> None:
    assert run_score(run(0, 0, [0.1, 0.3, 0.5]), 2) == pytest.approx(0.4)
    assert run_score(run(0, 0, [0.2]), 2) == pytest.approx(0.2)
    assert run_score({"config_id": 0, "evals": []}, 2) is None


def test_the_seed_sd_pools_each_configurations_variance() -> None:
    # Variances 0.02 (0.1, 0.3) and 0.005 (0.5, 0.6): sqrt(mean) = sqrt(0.0125).
    assert pooled_seed_sd({0: [0.1, 0.3], 1: [0.5, 0.6], 2: [0.9]}) == pytest.approx(math.sqrt(0.0125))


def test_the_gap_is_best_minus_median_and_the_goal_needs_both_margins() -> None:
    runs = [run(c, s, [0.0, gold]) for c, golds in enumerate([[0.30, 0.32], [0.40, 0.42], [0.60, 0.62]])
            for s, gold in enumerate(golds)]
    result = summarise(runs, 1)
    assert result["best_config"] == 2 and result["best_mean"] == pytest.approx(0.61)
    assert result["median_mean"] == pytest.approx(0.41) and result["gap"] == pytest.approx(0.20)
    assert result["seed_sd"] == pytest.approx(math.sqrt(0.0002)) and result["goal_met"]
    noisy = [run(c, s, [0.0, gold]) for c, golds in enumerate([[0.1, 0.5], [0.2, 0.6], [0.3, 0.7]])
             for s, gold in enumerate(golds)]
    assert not summarise(noisy, 1)["goal_met"]  # a 0.1 gap inside seeds 0.28 apart


def test_quick_mode_writes_its_reading(tmp_path: Path) -> None:
    out = tmp_path / "matters.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.tuning_matters", "--quick", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["configs"] == 3 and result["runs"] == 6 and result["code"]
    assert "goal met:" in done.stdout


def test_the_published_table_reading_is_its_results_file() -> None:
    result = json.loads((REPO / "benchmarks/results/tuning_matters/tuning_matters_smollm2_v3.json").read_text())
    index = " ".join((REPO / "benchmarks/results/real_model_study/README.md").read_text().split())
    readme = " ".join((REPO / "benchmarks/README.md").read_text().split())  # the index keeps the earlier tasks
    assert f"averages {result['best_mean']:.4f} and the median configuration {result['median_mean']:.4f}: a gap " \
           f"of {result['gap']:+.4f}, against a pooled seed-to-seed SD of {result['seed_sd']:.4f} " \
           f"({result['gap_over_seed_sd']:.1f}x)" in index
    assert f"{result['gap']:+.3f} above the median's, {result['gap_over_seed_sd']:.1f}x the pooled seed SD" in readme
    for config, values in result["scores"].items():
        row = f"| {config} | " + " | ".join(f"{value:.4f}" for value in values) + f" | {result['means'][config]:.4f} |"
        assert row in index, config
    assert result["configs"] == 12 and result["runs"] == 24 and result["goal_met"]
