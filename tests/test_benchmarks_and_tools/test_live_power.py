"""benchmarks.live_power: a paired test's power and the pairs it needs, a live pair's noise, and the two designs read
from paired replays."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.live_power import pair_sd, paired_power, pairs_for_power, true_value_differences

REPO = Path(__file__).resolve().parents[2]


def simulated_power(delta: float, sd: float, pairs: int, trials: int = 20_000) -> float:
    """The slow reference: draw ``pairs`` differences N(delta, sd) and count the two-sided z tests (sd known) that
    reject at 5% in the direction of delta."""
    rng = random.Random(0)
    hits = 0
    for _ in range(trials):
        mean = sum(rng.gauss(delta, sd) for _ in range(pairs)) / pairs
        hits += mean / (sd / math.sqrt(pairs)) > 1.959964
    return hits / trials


@pytest.mark.parametrize(("delta", "sd", "pairs"), [(0.01, 0.04, 20), (0.02, 0.05, 30), (0.005, 0.04, 200)])
def test_the_power_matches_a_simulation(delta: float, sd: float, pairs: int) -> None:
    assert paired_power(delta, sd, pairs) == pytest.approx(simulated_power(delta, sd, pairs), abs=0.015)


def test_the_pairs_for_power_are_the_fewest_that_reach_it() -> None:
    needed = int(pairs_for_power(0.01, 0.04))
    assert paired_power(0.01, 0.04, needed) >= 0.8 > paired_power(0.01, 0.04, needed - 1)


def test_no_number_of_pairs_finds_a_difference_the_replay_does_not_show() -> None:
    assert pairs_for_power(0.0, 0.04) == math.inf and pairs_for_power(-0.01, 0.04) == math.inf


def test_a_live_pair_adds_each_arms_validation_noise() -> None:
    # Replay SD 0.03; two arms, each a mean over 2 seeds of SD 0.04: 0.03^2 + 2 * 0.04^2 / 2 = 0.0025.
    assert pair_sd(0.03, 0.04, 2) == pytest.approx(0.05)


def test_differences_pair_repeats_by_table_seed() -> None:
    reference = [{"regret": 0.05, "table_seed": [0, 0]}, {"regret": 0.0, "table_seed": [0, 1]}]
    candidate = [{"regret": 0.01, "table_seed": [0, 0]}, {"regret": 0.02, "table_seed": [0, 1]}]
    assert true_value_differences(reference, candidate) == pytest.approx([0.04, -0.02])
    with pytest.raises(ValueError, match="table seed"):
        true_value_differences(reference, list(reversed(candidate)))


def test_quick_mode_reads_both_designs(tmp_path: Path) -> None:
    out = tmp_path / "power.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.live_power", "--quick", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert set(result["designs"]) == {"superiority_equal_budget", "non_inferiority_half_budget"}
    for reading in result["designs"].values():
        assert reading["runs"] == (reading["power_in_a_day"] >= 0.8)
        assert math.isfinite(reading["live_pair_sd"]) and reading["pairs_in_a_day"] > 0


def test_a_missing_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks.live_power", "--equal", str(tmp_path / "none.json")],
                          cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "--matters is required" in done.stderr


def test_an_unreadable_replay_is_one_line_and_exit_2(tmp_path: Path) -> None:
    broken = tmp_path / "replay.json"
    broken.write_text("{not json")
    done = subprocess.run([sys.executable, "-m", "benchmarks.live_power", "--equal", str(broken), "--matters",
                           str(broken), "--study", str(broken)], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "cannot read" in done.stderr.splitlines()[-1]
