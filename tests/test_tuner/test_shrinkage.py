"""A race's means shrunk by the seed noise (tuner.study.shrinkage), against the formula computed the slow way, and the
ranking it gives a race: a configuration clearly better on two seeds ranks above a worse one on three."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import optuna
import pytest

from tuner.study.shrinkage import TAU2_FLOOR, pooled_noise, shrunk_means
from tuner.study.winner import read_winner

STORED_V7 = Path(__file__).resolve().parents[2] / "benchmarks/results/real_model_study/real_model_study_v7/study.db"


def slow_shrunk(groups: list[list[float]]) -> list[float]:
    """The module's formula, term by term, with plain loops."""
    squares, degrees = 0.0, 0
    for group in groups:
        if len(group) > 1 and max(group) > min(group):
            centre = sum(group) / len(group)
            squares += sum((x - centre) ** 2 for x in group)
            degrees += len(group) - 1
    sigma2 = squares / degrees
    means = [sum(group) / len(group) for group in groups]
    mu = sum(means) / len(means)
    spread = sum((m - mu) ** 2 for m in means) / (len(means) - 1)
    noise = sum(sigma2 / len(group) for group in groups) / len(groups)
    tau2 = max(spread - noise, TAU2_FLOOR * sigma2)
    return [mu + tau2 / (tau2 + sigma2 / len(group)) * (m - mu) for group, m in zip(groups, means, strict=True)]


@pytest.mark.parametrize("seed", range(20))
def test_shrunk_means_match_the_formula_computed_slowly(seed: int) -> None:
    rng = random.Random(seed)
    groups = [[rng.gauss(rng.uniform(0, 1), rng.uniform(0.01, 0.2)) for _ in range(rng.randint(1, 4))]
              for _ in range(rng.randint(2, 8))]
    groups[0].append(groups[0][0] + rng.uniform(-0.1, 0.1))  # at least one configuration on two seeds
    assert shrunk_means(groups) == pytest.approx(slow_shrunk(groups), abs=1e-12)


def test_nothing_is_shrunk_without_a_repeat_to_measure_the_noise_by() -> None:
    assert pooled_noise([[0.5], [0.7]]) is None and shrunk_means([[0.5], [0.7]]) is None
    assert shrunk_means([[0.5, 0.6]]) is None  # one configuration: nothing to shrink toward
    assert shrunk_means([[0.5, 0.5], [0.7, 0.7]]) is None  # repeats that agree exactly: no noise measured
    # A configuration stuck at the score's bound on every seed does not shrink the noise the others measured.
    assert pooled_noise([[0.0, 0.0, 0.0], [0.5, 0.7]]) == pooled_noise([[0.5, 0.7]])


def test_a_mean_on_more_seeds_moves_less() -> None:
    few = shrunk_means([[0.9, 0.8], [0.5, 0.6, 0.55, 0.5], [0.7, 0.72]]) or []
    assert few[0] < 0.85  # pulled toward the others' mean
    many = shrunk_means([[0.9, 0.8, 0.85, 0.85, 0.9, 0.8], [0.5, 0.6, 0.55, 0.5], [0.7, 0.72]]) or []
    assert abs(many[0] - 0.85) < abs(few[0] - 0.85)


def test_on_the_stored_seventh_task_study_the_configuration_better_on_two_seeds_wins(tmp_path: Path) -> None:
    # Trial 7 scored 0.574 and 0.545; trial 2, the old winner, 0.505, 0.481 and 0.483. The budget ended before trial
    # 7's third seed, and "more seeds first" threw it away: it was never validated.
    copy = tmp_path / "study.db"  # a copy: opening the stored file would leave SQLite's side files beside it
    shutil.copyfile(STORED_V7, copy)
    study = optuna.load_study(study_name="smollm2_v7", storage=f"sqlite:///{copy}")
    winner = read_winner(study)
    assert winner.best is not None and winner.best.number == 7
    assert [config.root.number for config in winner.race][:2] == [7, 2]
    assert winner.figure is not None and winner.figure.seeds == 2 and winner.figure.value == pytest.approx(0.5593, 1e-3)
