"""tuner.search.gold_model: the frontier read at any KL, the residual model against slow references, a known knob effect
recovered, and the choice among candidates that hit the aim."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tuner.search.frontier_peak import FrontierPeak
from tuner.search.gold_model import (
    MIN_TRIALS,
    NEAR_SHARE,
    RESIDUAL_SD,
    choose_near_aim,
    fit_gold_model,
    frontier_at,
    knob_row,
    study_gold_model,
)
from tuner.search.kl_model import design_row, knob_columns
from tuner.search.space import ParamSpec

SPACE = {
    "learning_rate": ParamSpec("learning_rate", "float", 1e-6, 2e-4, log=True),
    "cliprange": ParamSpec("cliprange", "float", 0.1, 0.3),
    "rollout_batch_size": ParamSpec("rollout_batch_size", "categorical", choices=(16, 32)),
}
BASE = {"total_episodes": 1536, "per_device_train_batch_size": 16}


def peak_with_curve(kls: list[float], values: list[float]) -> FrontierPeak:
    return FrontierPeak("peak", 2.0, max(values), 1.5, 2.5, 1.0, min(kls), max(kls), 8, 64, 0.3,
                        curve_kl=tuple(kls), curve_value=tuple(values))


def test_the_frontier_is_read_linearly_in_ln_kl_and_flat_past_its_ends() -> None:
    peak = peak_with_curve([0.5, 2.0, 8.0], [0.6, 0.75, 0.5])
    at = frontier_at(peak, np.array([0.5, 1.0, 2.0, 4.0, 0.1, 30.0]))
    # 1 nat lies halfway between 0.5 and 2 in ln KL; 4 halfway between 2 and 8.
    np.testing.assert_allclose(at, [0.6, 0.675, 0.75, 0.625, 0.6, 0.5])
    assert np.isnan(frontier_at(peak_with_curve([1.0], [0.7]), np.array([1.0]))).all()


def test_knob_rows_are_the_kl_models_z_columns() -> None:
    point = {"learning_rate": 1e-5, "cliprange": 0.3, "rollout_batch_size": 32}
    row = knob_row(SPACE, point, BASE)
    assert len(row) == len(knob_columns(SPACE)) == 2  # the clip range, and rollout 32 against 16
    np.testing.assert_allclose(row, design_row(SPACE, point, BASE)[-2:])
    np.testing.assert_allclose(row, [1.0, 1.0])


def _slow_fit(z: np.ndarray, r: np.ndarray, noise_var: float) -> tuple[np.ndarray, np.ndarray]:
    """The posterior by its definition, element by element: precision I/τ² + ZᵀZ/σ², mean Σ Zᵀr/σ²."""
    p = z.shape[1]
    precision = np.zeros((p, p))
    for j in range(p):
        for k in range(p):
            precision[j, k] = sum(z[i, j] * z[i, k] for i in range(len(r))) / noise_var
        precision[j, j] += 1.0 / RESIDUAL_SD**2
    cov = np.linalg.inv(precision)
    return cov @ np.array([sum(z[i, j] * r[i] for i in range(len(r))) / noise_var for j in range(p)]), cov


def test_the_residual_posterior_equals_the_slow_reference_at_its_noise() -> None:
    rng = np.random.default_rng(3)
    for draw in range(4):
        n, p = int(rng.integers(MIN_TRIALS, 20)), int(rng.integers(1, 5))
        z, r = rng.uniform(-1, 1, size=(n, p)), rng.normal(scale=0.05, size=n)
        model = fit_gold_model(z, r)
        assert model is not None and model.trials == n
        mean, cov = _slow_fit(z, r, model.noise_sd**2)
        np.testing.assert_allclose(model.mean, mean, rtol=1e-8, atol=1e-12, err_msg=f"mean, draw {draw}")
        np.testing.assert_allclose(model.cov, cov, rtol=1e-8, atol=1e-14, err_msg=f"covariance, draw {draw}")


def test_a_known_knob_effect_is_recovered_and_drawn_around() -> None:
    # Gold at a given KL rises by 0.04 with rollout 32, falls by 0.03 over the clip range, plus seed noise.
    rng = np.random.default_rng(0)
    z = np.column_stack([rng.uniform(-1, 1, 40), rng.integers(0, 2, 40).astype(float)])
    r = -0.03 * z[:, 0] + 0.04 * z[:, 1] + rng.normal(scale=0.01, size=40)
    model = fit_gold_model(z, r)
    assert model is not None
    np.testing.assert_allclose(model.mean, [-0.03, 0.04], atol=0.01)
    assert 0.005 < model.noise_sd < 0.02
    draws = np.array([model.draw(np.random.default_rng(seed)) for seed in range(200)])
    np.testing.assert_allclose(draws.mean(axis=0), model.mean, atol=0.003)
    np.testing.assert_allclose(np.cov(draws.T), model.cov, atol=2e-5)
    # Too few trials, or a non-finite residual among them, fit nothing from those.
    assert fit_gold_model(z[:2], r[:2]) is None
    assert fit_gold_model(z[:3], np.array([0.1, math.nan, 0.2])) is None


def test_a_studys_residuals_are_read_from_its_frontier() -> None:
    peak = peak_with_curve([0.5, 2.0, 8.0], [0.6, 0.75, 0.5])
    finals = [({"learning_rate": 1e-5, "cliprange": 0.1, "rollout_batch_size": 32}, 2.0, 0.80),
              ({"learning_rate": 1e-5, "cliprange": 0.1, "rollout_batch_size": 16}, 2.0, 0.70),
              ({"learning_rate": 2e-5, "cliprange": 0.3, "rollout_batch_size": 32}, 8.0, 0.55),
              ({"learning_rate": 3e-5, "cliprange": 0.3, "rollout_batch_size": 16}, 0.5, 0.55)]
    model = study_gold_model(SPACE, BASE, peak, finals)
    z = np.array([knob_row(SPACE, point, BASE) for point, *_ in finals])
    expected = fit_gold_model(z, np.array([0.05, -0.05, 0.05, -0.05]))
    assert model is not None and expected is not None
    np.testing.assert_allclose(model.mean, expected.mean, atol=1e-12)
    assert model.mean[1] > 0  # rollout 32 sat above the frontier, 16 below
    assert study_gold_model(SPACE, BASE, None, finals) is None
    assert study_gold_model(SPACE, BASE, peak_with_curve([1.0], [0.7]), finals) is None


def test_the_best_score_among_the_candidates_near_the_aim_is_chosen() -> None:
    weights = np.array([1.0, 0.6, 0.4, 0.9])
    scores = np.array([0.0, 0.3, 9.0, 0.1])
    assert NEAR_SHARE == 0.5
    assert choose_near_aim(weights, scores) == 1  # 2 scores best but hits the aim less than half as well
    assert choose_near_aim(np.zeros(3), np.array([1.0, 2.0, 3.0])) == 0
    with pytest.raises(ValueError):
        choose_near_aim(np.array([]), np.array([]))
