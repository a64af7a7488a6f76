"""How much KL a configuration buys: a Bayesian power law in its step mass and its other knobs, fitted to the
study's own trials.

Each evaluation of each trial is one point. After u updates of K PPO epochs over N mini-batches at learning rate
lr, the policy has taken u·K·N optimizer steps, each moving a weight by about lr (Adam's step barely depends on the
gradient's scale). Their product, the step mass M = lr·u·K·N, bounds how far the policy has moved from the SFT
policy, and its KL grows with that distance. The model is

    ln KL = a + s·ln M + Σ_f d_f·ln f + Σ_j c_j·z_j + noise,   f in (lr, u, K, N),   noise ~ N(0, σ²)

- s, the mass exponent, is shared by the four factors;
- d_f lets one factor buy more or less KL than its share of the mass (measured: a larger lr at fewer steps buys
  more, more mini-batches buy less);
- z_j are the other searched knobs, each scaled to [-1, 1] over its range (a log range on a log scale), and a
  categorical's choices other than its first as 0/1 indicators: a fixed β, a KL target, the rollout, the clip.

Gaussian priors (``PRIORS``) make a handful of trials enough: they pull the fit towards the plain mass law (s near
1, every d_f and c_j near 0) until the data say otherwise. σ² has a scaled inverse-χ² prior. The points of one
trial share its errors, so each trial's points weigh 1 in all: a trial evaluated 40 times counts no more than one
evaluated 4 times.

Nothing here is fitted to a task: the priors are the neutral guesses of the argument above, and the coefficients
come from the study's own trials.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ppo_core.config.ppo_config import settable_fields
from tuner.search.space import ParamSpec, config_values

MASS_FACTORS = ("learning_rate", "updates", "num_ppo_epochs", "num_mini_batches")
"""The factors of the step mass, as the design's ``ln f`` columns are named."""
MASS_KNOBS = ("learning_rate", "total_episodes", "num_ppo_epochs")
"""Searched knobs that enter through the mass (``total_episodes`` through the updates u), not as a z column; the
mini-batch count comes from ``mini_batch_size`` and the rollout, which also stay z columns (they change what a step
sees, not only how many there are)."""

INTERCEPT_SD = 10.0
"""The prior's sd of a: wide, since what a unit of mass buys depends on the task's reward and response length."""
MASS_EXPONENT_MEAN = 1.0
MASS_EXPONENT_SD = 1.0
"""s ~ N(1, 1): KL proportional to the mass is the neutral guess between a small move's KL (quadratic in the
distance) and a saturating one."""
FACTOR_SD = 0.3
"""d_f ~ N(0, 0.3²): one factor's exponent differs from the shared one by a fraction of it."""
KNOB_SD = 1.0
"""c_j ~ N(0, 1): over its whole range a knob moves ln KL by up to about 2 (a factor of e² in KL)."""
NOISE_SD = 0.5
NOISE_DOF = 2.0
"""σ² ~ scaled-inv-χ²(2, 0.5²): runs alike but for their seed differ in KL by a factor of about e^0.5 = 1.6, until
the trials say otherwise."""
NOISE_PASSES = 3
"""The posterior and σ² are refitted in turn this many times; both settle within two."""
MIN_TRIALS = 2
"""Below this many trials with a usable point there is no slope along a trial and across trials to speak of."""


@functools.cache
def _defaults() -> dict[str, Any]:
    """PPOConfig's default of every settable field: read once, since a proposal builds hundreds of design rows."""
    return {name: field.default for name, field in settable_fields().items()}


def _values(point: Mapping[str, Any], base: Mapping[str, Any]) -> Callable[[str], Any]:
    """A run's value of a PPOConfig field: the point's (``config_values``, as a trial gets it) over the base's over
    PPOConfig's default."""
    given = dict(base) | config_values(point, base)
    defaults = _defaults()
    return lambda name: given[name] if name in given else defaults[name]


def _rollout(value: Callable[[str], Any]) -> int:
    return int(value("per_device_train_batch_size") * value("gradient_accumulation_steps"))


def rollout_episodes(point: Mapping[str, Any], base: Mapping[str, Any]) -> int:
    """Episodes per update, R = per_device_train_batch_size x gradient_accumulation_steps (one process)."""
    return _rollout(_values(point, base))


def mass_factors(point: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, float]:
    """The step mass's factors for a run of ``point`` over ``base`` (``tuner.search.space.config_values``, as a trial
    gets its values; PPOConfig's defaults where neither sets one), with ``updates`` the run's whole count,
    ceil(E / R): E total_episodes, R the rollout (per_device_train_batch_size x gradient_accumulation_steps)."""
    value = _values(point, base)
    rollout = _rollout(value)
    return {"learning_rate": float(value("learning_rate")),
            "updates": float(math.ceil(value("total_episodes") / rollout)),
            "num_ppo_epochs": float(value("num_ppo_epochs")),
            "num_mini_batches": float(value("num_mini_batches"))}


def log10_step_mass(point: Mapping[str, Any], base: Mapping[str, Any]) -> float:
    """log10( lr · u · K · N ) for the run's whole count of updates u (:func:`mass_factors`)."""
    return math.log10(math.prod(mass_factors(point, base).values()))


def knob_columns(space: Mapping[str, ParamSpec]) -> list[tuple[str, Any]]:
    """The z columns: (knob, None) for a searched range, (knob, choice) for each choice of a categorical but its
    first; the mass knobs are left out (they enter through the mass)."""
    columns: list[tuple[str, Any]] = []
    for name, spec in space.items():
        if name in MASS_KNOBS:
            continue
        if spec.type == "categorical":
            columns.extend((name, choice) for choice in spec.choices[1:])
        else:
            columns.append((name, None))
    return columns


def knob_value(spec: ParamSpec, value: Any) -> float:
    """A range's value scaled to [-1, 1] over it (on a log scale for a log range)."""
    assert spec.low is not None and spec.high is not None  # numeric parameters have both
    low, high, at = (math.log(spec.low), math.log(spec.high), math.log(value)) if spec.log else \
        (float(spec.low), float(spec.high), float(value))
    return 0.0 if high == low else 2.0 * (at - low) / (high - low) - 1.0


def design_row(space: Mapping[str, ParamSpec], point: Mapping[str, Any], base: Mapping[str, Any],
               updates: float | None = None) -> np.ndarray:
    """One row of the design: 1, ln M, ln lr, ln u, ln K, ln N, then the z columns (:func:`knob_columns`; 0 where the
    knob is not in force at ``point``). ``updates`` is u, the updates run so far; None for the whole run."""
    factors = mass_factors(point, base)
    if updates is not None:
        factors["updates"] = float(updates)
    logs = [math.log(factors[name]) for name in MASS_FACTORS]
    z = []
    for name, choice in knob_columns(space):
        if name not in point:
            z.append(0.0)
        elif space[name].type == "categorical":
            z.append(float(point[name] == choice))
        else:
            z.append(knob_value(space[name], point[name]))
    return np.array([1.0, sum(logs), *logs, *z])


def prior(space: Mapping[str, ParamSpec]) -> tuple[np.ndarray, np.ndarray]:
    """The coefficients' prior means and sds, in :func:`design_row`'s order."""
    knobs = len(knob_columns(space))
    mean = np.array([0.0, MASS_EXPONENT_MEAN, *([0.0] * len(MASS_FACTORS)), *([0.0] * knobs)])
    sd = np.array([INTERCEPT_SD, MASS_EXPONENT_SD, *([FACTOR_SD] * len(MASS_FACTORS)), *([KNOB_SD] * knobs)])
    return mean, sd


def gaussian_posterior(x: np.ndarray, y: np.ndarray, w: np.ndarray, prior_mean: np.ndarray, prior_sd: np.ndarray,
                       noise_var: float) -> tuple[np.ndarray, np.ndarray]:
    """The coefficients' posterior under prior N(μ0, diag(sd²)), weighted Gaussian noise of variance σ²/w_i:

        Σn = ( diag(1/sd²) + XᵀWX/σ² )⁻¹,    μn = Σn ( μ0/sd² + XᵀWy/σ² )
    """
    precision = np.diag(1.0 / prior_sd**2) + (x.T * w) @ x / noise_var
    cov = np.linalg.inv(precision)
    cov = (cov + cov.T) / 2  # exact symmetry, for sampling and for sds of predictions
    return cov @ (prior_mean / prior_sd**2 + (x.T * w) @ y / noise_var), cov


def noise_variance(residuals: np.ndarray, w: np.ndarray, prior_dof: float = NOISE_DOF,
                   prior_sd: float = NOISE_SD) -> float:
    """σ² given the residuals, under a scaled inverse-χ²(ν0, s0²) prior (its posterior mode's smoothing):

        σ² = ( ν0·s0² + Σ w_i r_i² ) / ( ν0 + Σ w_i )
    """
    return float((prior_dof * prior_sd**2 + np.sum(w * residuals**2)) / (prior_dof + np.sum(w)))


def trial_weights(trials: np.ndarray) -> np.ndarray:
    """Each point's weight, 1 / (its trial's number of points): every trial weighs 1."""
    _, inverse, counts = np.unique(trials, return_inverse=True, return_counts=True)
    return 1.0 / counts[inverse]


@dataclass(frozen=True)
class KLModel:
    """The fitted posterior: coefficients' mean and covariance, σ, and what it was fitted on."""

    mean: np.ndarray
    cov: np.ndarray
    noise_sd: float
    trials: int
    points: int

    def predict(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """ln KL's predictive mean and sd at each row of the design: x·μn and sqrt(x Σn xᵀ + σ²)."""
        rows = np.atleast_2d(rows)
        spread = np.einsum("ij,jk,ik->i", rows, self.cov, rows)
        return rows @ self.mean, np.sqrt(spread + self.noise_sd**2)

    @property
    def mass_exponent(self) -> float:
        return float(self.mean[1])


def fit_kl_model(x: np.ndarray, kl: np.ndarray, trials: np.ndarray, prior_mean: np.ndarray,
                 prior_sd: np.ndarray, floor: float) -> KLModel | None:
    """The posterior of ln KL on the design ``x`` over the points whose KL is finite and at least ``floor`` (below
    it the estimator's noise swamps the signal; a point before any update has no mass). None when fewer than
    :data:`MIN_TRIALS` trials have such a point."""
    keep = np.isfinite(kl) & (kl >= floor) & np.all(np.isfinite(x), axis=1)
    x, y, trials = x[keep], np.log(kl[keep]), trials[keep]
    if len(np.unique(trials)) < MIN_TRIALS:
        return None
    w = trial_weights(trials)
    noise_var = NOISE_SD**2
    for _ in range(NOISE_PASSES):
        mean, cov = gaussian_posterior(x, y, w, prior_mean, prior_sd, noise_var)
        noise_var = noise_variance(y - x @ mean, w)
    mean, cov = gaussian_posterior(x, y, w, prior_mean, prior_sd, noise_var)
    return KLModel(mean, cov, math.sqrt(noise_var), len(np.unique(trials)), len(y))


def study_kl_model(space: Mapping[str, ParamSpec], base: Mapping[str, Any],
                   points: Sequence[tuple[int, Mapping[str, Any], float, float]], floor: float) -> KLModel | None:
    """:func:`fit_kl_model` on a study's points: (trial, its point of the space, updates run, KL there)."""
    points = [p for p in points if p[2] >= 1]  # an evaluation before the first update has no mass
    if not points:
        return None
    x = np.array([design_row(space, point, base, updates) for _, point, updates, _ in points])
    mean, sd = prior(space)
    return fit_kl_model(x, np.array([kl for *_, kl in points], dtype=float),
                        np.array([trial for trial, *_ in points]), mean, sd, floor)
