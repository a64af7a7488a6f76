"""The frontier peak: the smoother against slow references, peaks placed by synthetic landscapes with a known answer,
the cases with no peak to read, and the measured curve table."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from helpers.frontier_paths import peaked_paths

from tuner.search.frontier_peak import (
    BANDWIDTHS,
    KL_FLOOR,
    MIN_POINTS,
    choose_bandwidth,
    curve_peak,
    frontier_peak,
    local_linear,
    thin_paths,
)

CURVE_TABLE = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "curve_tables" / "curve_table.jsonl"


def slow_local_linear(x: np.ndarray, y: np.ndarray, g: float, h: float) -> float:
    """The intercept of the weighted least-squares line through (x - g, y), weights exp(-((x - g)/h)^2/2)."""
    root = np.sqrt(np.exp(-0.5 * ((x - g) / h) ** 2))
    design = np.column_stack([np.ones_like(x), x - g]) * root[:, None]
    coefficients, *_ = np.linalg.lstsq(design, y * root, rcond=None)
    return float(coefficients[0])


@pytest.mark.parametrize("h", [0.2, 0.5, 1.3])
def test_local_linear_is_the_weighted_least_squares_line_at_each_point(h: float) -> None:
    rng = np.random.default_rng(3)
    x, y = rng.uniform(-2, 2, 40), rng.normal(size=40)
    grid = np.linspace(-1.5, 1.5, 7)
    curve, weight = local_linear(x, y, grid, h)
    assert curve == pytest.approx([slow_local_linear(x, y, g, h) for g in grid], rel=1e-7, abs=1e-9)
    assert weight == pytest.approx([np.exp(-0.5 * ((x - g) / h) ** 2).sum() for g in grid])


def test_local_linear_keeps_a_line_and_cannot_read_one_point() -> None:
    x = np.linspace(0, 3, 12)
    curve, _ = local_linear(x, 0.5 - 2 * x, np.array([-1.0, 0.7, 4.0]), 0.4)
    assert curve == pytest.approx([2.5, -0.9, -7.5])  # a line is its own local fit, even past the points
    single, _ = local_linear(np.full(5, 1.0), np.arange(5.0), np.array([1.0, 2.0]), 0.4)
    assert np.isnan(single).all()  # all weight at one x: no slope, no fit


def test_the_peak_is_read_inside_the_points_never_where_a_line_only_extrapolates() -> None:
    # A resampled study may lack the trials that reached the highest KL; its curve must stop where its points do.
    x = np.linspace(0.0, 1.0, 30)
    peak_x, value, position, readable = curve_peak(x, x.copy(), 0.3, np.linspace(-1.0, 3.0, 41))
    assert peak_x == pytest.approx(1.0) and value == pytest.approx(1.0)
    assert position == readable - 1 == 10  # the grid points 0.0, 0.1, ..., 1.0


def test_bandwidth_is_the_one_that_predicts_held_out_trials_best() -> None:
    rng = np.random.default_rng(5)
    groups = np.repeat(np.arange(6), 7)
    x = rng.uniform(-3, 2, groups.size)
    y = np.sin(2 * x) + rng.normal(scale=0.1, size=groups.size)
    errors = []
    for h in BANDWIDTHS:
        squared = []
        for i in range(x.size):
            others = groups != groups[i]
            squared.append((y[i] - slow_local_linear(x[others], y[others], x[i], h)) ** 2)
        errors.append(np.mean(squared))
    assert choose_bandwidth(groups, x, y) == BANDWIDTHS[int(np.argmin(errors))]
    # A wiggly truth wants a narrow smoother, a line the widest.
    assert choose_bandwidth(groups, x, y) < 0.5
    assert choose_bandwidth(groups, x, 1 + 0.3 * x + rng.normal(scale=0.05, size=x.size)) == max(BANDWIDTHS)


def synthetic_study(peak_kl: float, trials: int, seed: int, reach: tuple[float, float] | None = None,
                    noise: float = 0.015) -> tuple[list[int], list[float], list[float]]:
    """Trials whose KL grows along their path to a final KL drawn log-uniformly from ``reach`` (by default from
    an eighth of the peak to 4x it), scored by a gold curve that peaks at ``peak_kl``: gold = 0.75 - 0.08 (ln KL -
    ln peak)^2, plus noise. Eight evaluations a trial."""
    rng = np.random.default_rng(seed)
    low, high = reach or (peak_kl / 8, peak_kl * 4)
    finals = np.exp(rng.uniform(np.log(low), np.log(high), trials))
    return peaked_paths(finals, peak_kl, noise=noise, jitter=0.1, rng=rng)


@pytest.mark.parametrize("peak_kl", [0.4, 1.5, 6.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_known_peak_is_found_from_six_trials_wherever_it_lies(peak_kl: float, seed: int) -> None:
    peak = frontier_peak(*synthetic_study(peak_kl, trials=6, seed=seed))
    assert peak.status == "peak", peak
    assert peak_kl / 1.3 < peak.kl < peak_kl * 1.3, peak
    assert peak.kl_low <= peak_kl <= peak.kl_high, peak
    # Most resampled studies show the turn too; those without the few trials that went past it cannot.
    assert peak.inside >= 0.6 and peak.value == pytest.approx(0.75, abs=0.03), peak
    assert peak.trials == 6 and peak.points == 48 and peak.bandwidth in BANDWIDTHS
    # The curve drawn is the one the peak was read from.
    assert list(peak.curve_kl) == sorted(peak.curve_kl)
    assert peak.curve_kl[0] < peak.curve_kl[-1] <= peak.kl_max * (1 + 1e-12)
    assert max(peak.curve_value) == peak.value
    assert peak.curve_kl[peak.curve_value.index(peak.value)] == pytest.approx(peak.kl, rel=1e-12)


def test_a_curve_still_rising_or_already_falling_says_which_way_the_peak_lies() -> None:
    numbers, kls, golds = synthetic_study(20.0, trials=5, seed=2, reach=(0.5, 5.0))  # every path stops short of it
    rising = frontier_peak(numbers, kls, golds)
    assert rising.status == "rising", rising
    assert rising.kl > rising.kl_max / 1.2 and rising.inside < 0.2, rising
    numbers, kls, golds = synthetic_study(0.05, trials=5, seed=2, reach=(2.0, 20.0))  # every path ends past it
    falling = frontier_peak(numbers, kls, golds)
    assert falling.status == "falling", falling
    assert falling.kl < max(falling.kl_min, KL_FLOOR) * 1.2 and falling.inside < 0.2, falling


def test_a_lower_is_better_objective_peaks_where_its_negation_does() -> None:
    numbers, kls, golds = synthetic_study(1.5, trials=6, seed=0)
    up = frontier_peak(numbers, kls, golds)
    down = frontier_peak(numbers, kls, [-g for g in golds], maximize=False)
    assert (down.status, down.kl, down.kl_low, down.kl_high) == (up.status, up.kl, up.kl_low, up.kl_high)
    assert down.value == pytest.approx(-up.value)


def test_the_answer_does_not_depend_on_the_points_order() -> None:
    numbers, kls, golds = synthetic_study(1.5, trials=6, seed=1)
    shuffled = np.random.default_rng(9).permutation(len(numbers))
    again = frontier_peak([numbers[i] for i in shuffled], [kls[i] for i in shuffled], [golds[i] for i in shuffled])
    assert again == frontier_peak(numbers, kls, golds)


@pytest.mark.parametrize(("numbers", "kls", "golds", "reason"), [
    ([0] * 4 + [1] * 3, [0.1 * i for i in range(1, 8)], [0.5] * 7, f"the peak needs at least {MIN_POINTS} of 2"),
    ([0] * 12, [0.1 * i for i in range(1, 13)], [0.5] * 12, "of 1 trials"),
    ([0, 1] * 6, [1.0] * 12, [0.1 * i for i in range(12)], "every evaluation is at about the same KL"),
    ([0, 1] * 6, [math.nan, math.inf, *[0.1 * i for i in range(1, 11)]], [0.5, 0.5, *[math.nan] * 10],
     "0 evaluations of 0 trials with a finite KL and objective"),
])
def test_points_that_cannot_show_a_peak_say_why_and_raise_nothing(
        numbers: list[int], kls: list[float], golds: list[float], reason: str) -> None:
    peak = frontier_peak(numbers, kls, golds)
    assert peak.status == "none" and reason in peak.reason, peak
    assert math.isnan(peak.kl) and math.isnan(peak.value)


def test_the_curve_tables_points_peak_where_its_best_configurations_end() -> None:
    # The measured table of task seed 0: its 26 configurations within 5% of the best end at 1.1-2.0 nats of held-out
    # KL. Every evaluation of every seed-0 run, read without knowing that, must find the turn inside that band.
    numbers, kls, golds = [], [], []
    for line in CURVE_TABLE.read_text().splitlines():
        row = json.loads(line)
        if row["seed"] == 0 and row["task_seed"] == 0:
            for evaluation in row["evals"]:
                numbers.append(row["config_id"])
                kls.append(evaluation.get("eval/kl", math.nan))
                golds.append(evaluation.get("eval/gold_score", math.nan))
    peak = frontier_peak(numbers, kls, golds, resamples=50)
    assert peak.status == "peak" and peak.trials == 240, peak
    assert 1.0 <= peak.kl_low <= peak.kl <= peak.kl_high <= 2.1, peak
    assert peak.kl_max > 10 * peak.kl  # the table reaches far past the peak: a turn, not an edge


def test_a_long_path_is_averaged_in_runs_of_neighbouring_points() -> None:
    t = np.array([0] * 30 + [1] * 5)
    k = np.concatenate([np.arange(30.0), np.arange(5.0)])
    v = k * 2
    thin_t, thin_k, thin_v = thin_paths(t, k, v, per_trial=12)
    assert list(thin_t) == [0] * 12 + [1] * 5
    runs = np.array_split(np.arange(30.0), 12)  # 6 runs of 3 points, then 6 of 2
    assert thin_k[:12] == pytest.approx([run.mean() for run in runs]) and thin_v[:12] == pytest.approx(2 * thin_k[:12])
    assert list(thin_k[12:]) == list(range(5))  # a short path is kept as it is


def test_a_study_of_long_training_paths_finds_its_peak_too() -> None:
    # A study recorded without held-out evaluations: the frontier reads one training point per update.
    numbers, kls, golds = peaked_paths(np.geomspace(0.3, 12.0, 10), 2.0, evaluations=120, noise=0.03,
                                       rng=np.random.default_rng(4))
    peak = frontier_peak(numbers, kls, golds)
    assert peak.status == "peak" and 2.0 / 1.3 < peak.kl < 2.0 * 1.3 and peak.points == 1200, peak
