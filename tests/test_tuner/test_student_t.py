"""Student's t quantile against scipy.stats' own, the slow reference."""

from __future__ import annotations

import pytest
from scipy import stats  # type: ignore[import-untyped]

from tuner.study.student_t import t_quantile


@pytest.mark.parametrize("probability", [0.5, 0.8, 0.9, 0.95, 0.975, 0.99, 0.999])
def test_the_t_quantile_is_scipy_stats_own_to_the_last_bit(probability: float) -> None:
    for degrees_of_freedom in range(1, 200):
        assert t_quantile(probability, degrees_of_freedom) == stats.t.ppf(probability, degrees_of_freedom)
