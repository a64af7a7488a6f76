"""The critic-free estimators' advantages against direct, loop-by-loop references."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from ppo_core.algorithm.group_advantages import (
    group_mean_baseline,
    group_reward_stats,
    grpo_advantages,
    rloo_advantages,
)
from ppo_core.config.ppo_config import GRPO_STD_EPSILON

SCORES = torch.tensor([0.1, 0.9, 0.4, 0.4, 1.0, 1.0, 1.0, 1.0, -0.5, 0.25, 2.0, 0.75])


def _groups(values: list[float], size: int) -> list[list[float]]:
    return [values[start:start + size] for start in range(0, len(values), size)]


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_grpo_matches_the_formula_row_by_row(scale: str) -> None:
    values = SCORES.tolist()
    batch_std = statistics.stdev(values)
    expected = []
    for group in _groups(values, 4):
        mean, std = statistics.fmean(group), statistics.stdev(group)
        divisor = {"group": std + GRPO_STD_EPSILON, "batch": batch_std + GRPO_STD_EPSILON, "none": 1.0}[scale]
        expected += [(value - mean) / divisor for value in group]
    got = grpo_advantages(SCORES, 4, scale)  # type: ignore[arg-type]
    assert got.tolist() == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_rloo_baseline_is_the_other_responses_mean() -> None:
    values = SCORES.tolist()
    expected = []
    for group in _groups(values, 3):
        for index, value in enumerate(group):
            others = group[:index] + group[index + 1:]
            expected.append(value - sum(others) / len(others))
    assert rloo_advantages(SCORES, 3).tolist() == pytest.approx(expected, abs=1e-6)
    with pytest.raises(ValueError, match="at least 2"):
        rloo_advantages(SCORES, 1)


def test_group_mean_baseline_and_stats() -> None:
    values = SCORES.tolist()
    expected = [value - statistics.fmean(group) for group in _groups(values, 4) for value in group]
    assert group_mean_baseline(SCORES, 4).tolist() == pytest.approx(expected, abs=1e-6)
    reward_std, zero_std = group_reward_stats(SCORES, 4)
    assert reward_std == pytest.approx(statistics.fmean(statistics.stdev(g) for g in _groups(values, 4)), rel=1e-5)
    assert zero_std == pytest.approx(1 / 3)  # the second group is all 1.0: no signal


def test_a_group_of_equal_scores_gets_zero_advantage_and_bad_sizes_fail() -> None:
    assert grpo_advantages(torch.ones(6), 3).abs().max() == 0
    assert not math.isnan(float(grpo_advantages(torch.ones(6), 3).sum()))
    with pytest.raises(ValueError, match="do not split"):
        grpo_advantages(SCORES, 5)
