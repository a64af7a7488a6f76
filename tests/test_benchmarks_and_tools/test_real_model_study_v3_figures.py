"""The third text task's study figures that the benchmarks index, the study's page (benchmarks/results/real_model_study/
README.md) and the study file publish are the ones in benchmarks/results/real_model_study/real_model_study_v3.json,
at their printed precision."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULT = json.loads((ROOT / "benchmarks/results/real_model_study/real_model_study_v3.json").read_text())


def joined(path: str) -> str:
    return " ".join((ROOT / path).read_text().replace("# ", " ").split())  # lines (and comment marks) joined


def test_each_comparison_is_published_with_its_paired_interval() -> None:
    # The index carries the earlier tasks' figures; README.md quotes the current task's.
    index, readme = joined("benchmarks/results/real_model_study/README.md"), joined("benchmarks/README.md")
    for arm, pair in RESULT["tuned_minus"].items():
        short = f"{pair['mean']:+.3f} [{pair['ci_low']:+.3f}, {pair['ci_high']:+.3f}]"
        full = f"{pair['mean']:+.3f}, 95% [{pair['ci_low']:+.3f}, {pair['ci_high']:+.3f}], 99% " \
               f"[{pair['ci99_low']:+.3f}, {pair['ci99_high']:+.3f}]"
        assert short in readme, arm
        assert full in index, arm
    untuned = RESULT["tuned_minus"]["untuned"]
    figure = f"+0.140, 95% [{untuned['ci_low']:+.3f}, {untuned['ci_high']:+.3f}]"
    assert figure in joined("benchmarks/studies/smollm2_v3.yaml")


def test_the_winner_and_the_times_are_the_files() -> None:
    index = joined("benchmarks/results/real_model_study/README.md")
    winner, seconds = RESULT["winner"], RESULT["seconds"]
    assert f"held-out gold {winner['mean']:.4f}, 95% [{winner['ci_low']:.4f}, {winner['ci_high']:.4f}]" in index
    assert f"12 trials in {seconds['study']:.0f} s" in index
    for arm, values in RESULT["arms"].items():
        assert f"| {arm} | " + " | ".join(f"{value:.4f}" for value in values.values()) in index, arm
    assert RESULT["study"]["name"] == "smollm2_v3" and winner["n"] == 5 and winner["feasible_runs"] == 5
