"""benchmarks.common.landscape: R² of a least-squares polynomial against the normal equations, and gold by KL."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.common.landscape import EvalPoint, gold_by_kl, landscape, polynomial_r2


def slow_r2(x: list[float], y: list[float], degree: int) -> float:
    # The normal equations (VᵀV) c = Vᵀy for the Vandermonde matrix V, solved directly, then 1 - SSE / SST.
    v = np.array([[xi ** k for k in range(degree + 1)] for xi in x])
    coefficients = np.linalg.solve(v.T @ v, v.T @ np.array(y))
    fitted = v @ coefficients
    mean = sum(y) / len(y)
    return 1.0 - sum((a - b) ** 2 for a, b in zip(y, fitted, strict=True)) / sum((a - mean) ** 2 for a in y)


@pytest.mark.parametrize("degree", [1, 2])
def test_polynomial_r2_matches_the_normal_equations(degree: int) -> None:
    rng = np.random.default_rng(0)
    x = list(rng.uniform(-3, 0, 30))
    y = [0.5 - (xi + 1.5) ** 2 + rng.normal(0, 0.3) for xi in x]
    assert polynomial_r2(x, y, degree) == pytest.approx(slow_r2(x, y, degree), abs=1e-9)


def test_polynomial_r2_is_one_on_an_exact_fit_and_nan_when_it_cannot_be_read() -> None:
    assert polynomial_r2([0, 1, 2, 3], [1, 3, 5, 7], 1) == pytest.approx(1.0)
    assert math.isnan(polynomial_r2([0, 1], [1, 2], 1))  # no degree of freedom left
    assert math.isnan(polynomial_r2([0, 1, 2], [4, 4, 4], 1))  # nothing to explain


def test_landscape_reads_the_peak_and_bins_gold_by_kl() -> None:
    points = [EvalPoint(-3.0, -0.02, 0.50), EvalPoint(-2.5, 0.5, 0.55), EvalPoint(-2.0, 4.0, 0.62),
              EvalPoint(-1.5, 12.0, 0.58), EvalPoint(-1.0, 40.0, 0.10)]
    result = landscape(points, [0.0, 1.0, 10.0, 100.0])
    assert result["best_gold"] == {"gold": 0.62, "kl": 4.0, "log10_mass": -2.0}
    # A KL at or below zero is read at the floor, so it still enters the fit.
    assert result["points"] == 5 and 0.9 < float(result["r2_log_kl_on_mass"]) <= 1.0  # type: ignore[arg-type]
    assert gold_by_kl(points, [0.0, 1.0, 10.0, 100.0]) == [
        {"kl_low": 0.0, "kl_high": 1.0, "n": 1, "mean_gold": 0.55},
        {"kl_low": 1.0, "kl_high": 10.0, "n": 1, "mean_gold": 0.62},
        {"kl_low": 10.0, "kl_high": 100.0, "n": 2, "mean_gold": pytest.approx(0.34)},
    ]
