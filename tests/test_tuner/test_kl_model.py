"""tuner.search.kl_model: the step mass's factors, the design, the posterior against slow references, and a known power
law recovered from trials drawn from it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ppo_core.config.ppo_config import PPOConfig
from tuner.search.frontier_peak import KL_FLOOR
from tuner.search.kl_model import (
    FACTOR_SD,
    design_row,
    gaussian_posterior,
    knob_columns,
    log10_step_mass,
    mass_factors,
    noise_variance,
    prior,
    study_kl_model,
    trial_weights,
)
from tuner.search.space import ParamSpec, config_values

SPACE = {
    "learning_rate": ParamSpec("learning_rate", "float", 1e-6, 2e-4, log=True),
    "num_ppo_epochs": ParamSpec("num_ppo_epochs", "int", 1, 8),
    "kl_coef": ParamSpec("kl_coef", "float", 0.01, 0.2, log=True),
    "cliprange": ParamSpec("cliprange", "float", 0.1, 0.3),
    "mini_batch_size": ParamSpec("mini_batch_size", "categorical", choices=(4, 8, 16)),
}
BASE = {"total_episodes": 1536, "per_device_train_batch_size": 16}


def _random_point(rng: np.random.Generator) -> dict[str, object]:
    return {"learning_rate": float(math.exp(rng.uniform(math.log(1e-6), math.log(2e-4)))),
            "num_ppo_epochs": int(rng.integers(1, 9)), "kl_coef": float(math.exp(rng.uniform(math.log(0.01),
                                                                                                 math.log(0.2)))),
            "cliprange": float(rng.uniform(0.1, 0.3)), "mini_batch_size": int(rng.choice([4, 8, 16]))}


def test_mass_factors_are_the_trainers_own_counts() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        point = _random_point(rng)
        config = PPOConfig(**{**BASE, **config_values(point, BASE)})
        rollout = config.per_device_train_batch_size * config.gradient_accumulation_steps
        assert config.total_episodes is not None  # BASE sets it
        factors = mass_factors(point, BASE)
        assert factors == {"learning_rate": config.learning_rate, "updates": math.ceil(config.total_episodes / rollout),
                           "num_ppo_epochs": config.num_ppo_epochs, "num_mini_batches": config.num_mini_batches}
        assert log10_step_mass(point, BASE) == pytest.approx(math.log10(math.prod(factors.values())))


def test_a_design_row_is_the_log_mass_its_factors_and_each_knob_in_its_range() -> None:
    point = {"learning_rate": 1e-5, "num_ppo_epochs": 4, "kl_coef": 0.2, "cliprange": 0.1, "mini_batch_size": 8}
    row = design_row(SPACE, point, BASE, updates=10)
    # 16-episode rollouts in mini-batches of 8: 2 mini-batches.
    logs = [math.log(1e-5), math.log(10), math.log(4), math.log(2)]
    assert row[0] == 1 and row[1] == pytest.approx(sum(logs)) and row[2:6] == pytest.approx(logs)
    assert knob_columns(SPACE) == [("kl_coef", None), ("cliprange", None), ("mini_batch_size", 8),
                                   ("mini_batch_size", 16)]
    assert row[6:] == pytest.approx([1.0, -1.0, 1.0, 0.0])  # kl_coef at its top, the clip at its bottom
    # Without an update count, the whole run's: 1536 / 16 = 96 updates.
    assert design_row(SPACE, point, BASE)[3] == pytest.approx(math.log(96))
    # A knob not in force at a point sits in the middle of its range.
    assert design_row(SPACE, {k: v for k, v in point.items() if k != "kl_coef"}, BASE)[6] == 0.0


def _slow_posterior(x: np.ndarray, y: np.ndarray, w: np.ndarray, mean0: np.ndarray, sd0: np.ndarray,
                    noise_var: float) -> tuple[np.ndarray, np.ndarray]:
    """The posterior mean as the least-squares solution of the data rows scaled by sqrt(w/σ²) stacked on the prior's
    rows (one per coefficient, scaled by 1/sd), and the covariance from sums written out term by term."""
    rows = [x[i] * math.sqrt(w[i] / noise_var) for i in range(len(y))]
    targets = [y[i] * math.sqrt(w[i] / noise_var) for i in range(len(y))]
    for j in range(len(mean0)):
        unit = np.zeros(len(mean0))
        unit[j] = 1.0 / sd0[j]
        rows.append(unit)
        targets.append(mean0[j] / sd0[j])
    mean = np.linalg.lstsq(np.array(rows), np.array(targets), rcond=None)[0]
    precision = np.zeros((len(mean0), len(mean0)))
    for j in range(len(mean0)):
        for k in range(len(mean0)):
            precision[j, k] = sum(w[i] * x[i, j] * x[i, k] for i in range(len(y))) / noise_var
        precision[j, j] += 1.0 / sd0[j] ** 2
    return mean, np.linalg.inv(precision)


def test_the_posterior_equals_the_slow_reference() -> None:
    rng = np.random.default_rng(1)
    for trial in range(5):
        n, p = int(rng.integers(3, 30)), int(rng.integers(2, 7))
        x, y = rng.normal(size=(n, p)), rng.normal(size=n)
        w, mean0, sd0 = rng.uniform(0.1, 1, n), rng.normal(size=p), rng.uniform(0.1, 3, p)
        noise_var = float(rng.uniform(0.05, 2))
        fast, slow = gaussian_posterior(x, y, w, mean0, sd0, noise_var), _slow_posterior(x, y, w, mean0, sd0,
                                                                                           noise_var)
        np.testing.assert_allclose(fast[0], slow[0], rtol=1e-8, atol=1e-10, err_msg=f"mean, draw {trial}")
        np.testing.assert_allclose(fast[1], slow[1], rtol=1e-8, atol=1e-10, err_msg=f"covariance, draw {trial}")


def test_noise_variance_and_trial_weights_follow_their_formulas() -> None:
    residuals, w = np.array([0.5, -1.0, 2.0]), np.array([0.5, 0.5, 1.0])
    assert noise_variance(residuals, w, 2.0, 0.5) == pytest.approx((2 * 0.25 + 0.5 * 0.25 + 0.5 * 1 + 4) / 4)
    weights = trial_weights(np.array([3, 3, 3, 7, 9, 9]))
    assert weights == pytest.approx([1 / 3, 1 / 3, 1 / 3, 1, 1 / 2, 1 / 2]) and weights.sum() == pytest.approx(3)


def _law(row: np.ndarray) -> float:
    """A known landscape: KL = e^2.5 · M^0.8 · N^-0.3 (mini-batches buy less), · e^(-0.6 z_kl_coef)."""
    return 2.5 + 0.8 * row[1] - 0.3 * row[5] - 0.6 * row[6]


def _trials(count: int, rng: np.random.Generator, noise: float = 0.2) -> list[tuple[int, dict[str, object], float,
                                                                                             float]]:
    points = []
    for trial in range(count):
        point = _random_point(rng)
        offset = rng.normal(0, noise)  # a trial's own luck, shared by its points
        for updates in (24, 48, 72, 96):
            ln_kl = _law(design_row(SPACE, point, BASE, updates)) + offset + rng.normal(0, noise / 3)
            points.append((trial, point, float(updates), math.exp(ln_kl)))
    return points


def test_a_known_power_law_is_recovered_and_predicts_new_configurations() -> None:
    rng = np.random.default_rng(2)
    model = study_kl_model(SPACE, BASE, _trials(40, rng), KL_FLOOR)
    assert model is not None and model.trials <= 40
    # The shared exponent, the β knob's -0.6, and what splitting a rollout into more mini-batches buys (its count
    # is also what the mini-batch size's own columns say, so only their sum is identified).
    assert model.mass_exponent == pytest.approx(0.8, abs=0.15)
    assert model.mean[6] == pytest.approx(-0.6, abs=0.2)
    point = _random_point(rng)
    rows = np.array([design_row(SPACE, {**point, "mini_batch_size": size}, BASE) for size in (16, 4)])
    assert float(np.diff(model.predict(rows)[0])[0]) == pytest.approx(float(np.diff([_law(r) for r in rows])[0]),
                                                                       abs=0.2)
    fresh = [_random_point(rng) for _ in range(200)]
    rows = np.array([design_row(SPACE, point, BASE) for point in fresh])
    mean, sd = model.predict(rows)
    truth = np.array([_law(row) for row in rows])
    assert float(np.sqrt(np.mean((mean - truth) ** 2))) < 0.25
    # Its sds are honest: about 95% of fresh runs' ln KL (with their noise) fall within 2 sds.
    observed = truth + rng.normal(0, 0.2, len(truth))
    assert 0.85 <= float(np.mean(np.abs(observed - mean) < 2 * sd)) <= 1.0


def test_few_trials_stay_near_the_plain_mass_law_and_are_unsure() -> None:
    rng = np.random.default_rng(3)
    few = study_kl_model(SPACE, BASE, _trials(3, rng), KL_FLOOR)
    many = study_kl_model(SPACE, BASE, _trials(40, rng), KL_FLOOR)
    assert few is not None and many is not None
    # The factor deviations stay within about their prior sd, and the predictions are wider than with many trials.
    assert np.all(np.abs(few.mean[2:6]) < 2 * FACTOR_SD)
    row = design_row(SPACE, _random_point(rng), BASE)
    assert few.predict(row)[1][0] > many.predict(row)[1][0]


def test_points_below_the_floor_before_any_update_or_of_one_trial_fit_nothing() -> None:
    point = _random_point(np.random.default_rng(4))
    assert study_kl_model(SPACE, BASE, [], KL_FLOOR) is None
    one_trial = [(0, point, 24.0, 0.5), (0, point, 48.0, 1.0)]
    assert study_kl_model(SPACE, BASE, one_trial, KL_FLOOR) is None
    # Trial 1's only points are before any update, below the floor, or not finite: one trial is left.
    others = [(1, point, 0.0, 0.2), (1, point, 24.0, KL_FLOOR / 2), (1, point, 48.0, math.nan)]
    assert study_kl_model(SPACE, BASE, one_trial + others, KL_FLOOR) is None
    model = study_kl_model(SPACE, BASE, [*one_trial, (1, point, 24.0, 0.4)], KL_FLOOR)
    assert model is not None and (model.trials, model.points) == (2, 3)


def test_the_prior_has_one_entry_per_design_column() -> None:
    mean, sd = prior(SPACE)
    assert len(mean) == len(sd) == len(design_row(SPACE, _random_point(np.random.default_rng(5)), BASE))
    assert mean[1] == 1.0 and np.all(sd > 0)
