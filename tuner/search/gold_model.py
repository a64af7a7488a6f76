"""What a configuration's other knobs add to its objective at the KL it reaches: a Bayesian linear model of each
trial's distance from the study's frontier, for choosing among configurations aimed at the same KL.

The frontier f is the objective the study's evaluations reach at each KL (``tuner.search.frontier_peak``'s smoothed
curve). Trial t ends at KL k_t with objective g_t; its residual r_t = g_t - f(k_t) is what the trial got beyond what its
KL alone buys. The model is

    r_t = Σ_j c_j·z_tj + noise,    c_j ~ N(0, τ²),    noise ~ N(0, σ²)

with z the knob columns of ``tuner.search.kl_model`` (every searched knob but those of the step mass, each scaled to
[-1, 1] over its range, a categorical's other choices as 0/1): the rollout, the mini-batches, the clip range, a fixed
β or a KL target. The prior pulls every c_j to 0, so a handful of trials moves it only where they agree. A proposal
draws c from the posterior (Thompson sampling) and, among the candidates that hit the aimed KL about as well as the
best one, takes the one whose drawn residual is highest.

Nothing here is fitted to a task: τ and σ's prior are neutral sizes for a gold-like objective in [0, 1].
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuner.search.frontier_peak import KL_FLOOR, FrontierPeak
from tuner.search.kl_model import MASS_FACTORS, design_row, gaussian_posterior, noise_variance
from tuner.search.space import ParamSpec

RESIDUAL_SD = 0.05
"""τ: over its whole range a knob moves the objective at a given KL by about ±0.05 (a tenth of a gold scale)."""
NOISE_SD = 0.03
NOISE_DOF = 2.0
"""σ² ~ scaled-inv-χ²(2, 0.03²): runs alike but for their seed differ by a few hundredths."""
NOISE_PASSES = 3
MIN_TRIALS = 3
"""Below this many trials with a residual there is nothing to compare."""
NEAR_SHARE = 0.5
"""A candidate hits the aim about as well as the best when its aim density is at least this share of the best's."""


def knob_row(space: Mapping[str, ParamSpec], point: Mapping[str, Any], base: Mapping[str, Any]) -> np.ndarray:
    """The z columns of ``point`` (``tuner.search.kl_model.design_row`` without its intercept and mass columns)."""
    return design_row(space, point, base)[2 + len(MASS_FACTORS):]


def frontier_at(peak: FrontierPeak, kl: np.ndarray) -> np.ndarray:
    """f(k): the peak's smoothed curve, linear in ln KL between its grid points and flat past its ends; nan without a
    curve."""
    if len(peak.curve_kl) < 2:
        return np.full(np.shape(kl), np.nan)
    x = np.log(np.maximum(np.asarray(peak.curve_kl), KL_FLOOR))
    return np.interp(np.log(np.maximum(np.asarray(kl, dtype=float), KL_FLOOR)), x, np.asarray(peak.curve_value))


@dataclass(frozen=True)
class GoldModel:
    """The residual model's posterior: the coefficients' mean and covariance, and σ."""

    mean: np.ndarray
    cov: np.ndarray
    noise_sd: float
    trials: int

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """One draw of the coefficients c from their posterior."""
        return rng.multivariate_normal(self.mean, self.cov, method="cholesky")


def fit_gold_model(z: np.ndarray, residuals: np.ndarray) -> GoldModel | None:
    """The posterior of the residuals r on the knob rows ``z`` (one row a trial), σ² refitted in turn with the
    coefficients (``tuner.search.kl_model.noise_variance``); None with fewer than :data:`MIN_TRIALS` finite
    residuals."""
    keep = np.isfinite(residuals) & np.all(np.isfinite(z), axis=1)
    z, r = z[keep], residuals[keep]
    if len(r) < MIN_TRIALS or z.shape[1] == 0:
        return None
    w = np.ones(len(r))
    prior_mean, prior_sd = np.zeros(z.shape[1]), np.full(z.shape[1], RESIDUAL_SD)
    noise_var = NOISE_SD**2
    for _ in range(NOISE_PASSES):
        mean, cov = gaussian_posterior(z, r, w, prior_mean, prior_sd, noise_var)
        noise_var = noise_variance(r - z @ mean, w, NOISE_DOF, NOISE_SD)
    mean, cov = gaussian_posterior(z, r, w, prior_mean, prior_sd, noise_var)
    return GoldModel(mean, cov, math.sqrt(noise_var), len(r))


def study_gold_model(space: Mapping[str, ParamSpec], base: Mapping[str, Any], peak: FrontierPeak | None,
                     finals: Sequence[tuple[Mapping[str, Any], float, float]], maximize: bool = True,
                     ) -> GoldModel | None:
    """:func:`fit_gold_model` on a study's trials: each (its point, the KL it ended at, its objective there), their
    residuals from ``peak``'s curve (signed so that higher is better); None without a curve."""
    if peak is None or len(peak.curve_kl) < 2 or not finals:
        return None
    kls = np.array([kl for _, kl, _ in finals], dtype=float)
    values = np.array([value for *_, value in finals], dtype=float)
    residuals = (values - frontier_at(peak, kls)) * (1.0 if maximize else -1.0)
    z = np.array([knob_row(space, point, base) for point, *_ in finals])
    return fit_gold_model(z, residuals)


def choose_near_aim(weights: np.ndarray, scores: np.ndarray) -> int:
    """The candidate with the highest score among those whose aim weight is at least :data:`NEAR_SHARE` of the
    highest weight (the highest-weighted one when every weight is 0)."""
    top = float(np.max(weights))
    if not top > 0:
        return int(np.argmax(weights))
    near = np.flatnonzero(weights >= NEAR_SHARE * top)
    return int(near[np.argmax(scores[near])])
