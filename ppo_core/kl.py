"""Per-token KL estimators and the KL-coefficient controllers.

With log r_t = log pi_ref(y_t | s_t) - log pi_theta(y_t | s_t) on tokens sampled from pi_theta,
each estimator's expectation approximates KL(pi_theta || pi_ref) (Schulman, "Approximating KL
Divergence", 2020).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

ERROR_CLIP = 0.2
"""The adaptive controller's clip on its proportional error (Ziegler et al. 2019): it moves beta by at most this
share of n / horizon per batch of n episodes."""


def kl_per_token(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token KL estimate, with log r = ref_logprobs - logprobs:

    - k1  = -log r                  (unbiased, high variance, can be negative)
    - k2  = (log r)^2 / 2           (biased, low variance, >= 0)
    - k3  = (r - 1) - log r         (unbiased, low variance, >= 0)
    - abs = |log r|
    """
    log_ratio = ref_logprobs - logprobs
    if estimator == "k1":
        return -log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio**2
    if estimator == "k3":
        return torch.expm1(log_ratio) - log_ratio
    if estimator == "abs":
        return log_ratio.abs()
    raise ValueError(f"kl_estimator: unknown estimator {estimator!r}")


@dataclass
class FixedKLController:
    """beta stays at its initial value."""

    value: float

    def update(self, current_kl: float, n_steps: int) -> None:
        """A fixed controller ignores the observed KL."""


@dataclass
class AdaptiveKLController:
    """Ziegler et al. (2019): steer beta so that the observed KL tracks ``target``.

    e = clip(KL / target - 1, -c, c), c = ``ERROR_CLIP``;  beta <- beta * (1 + e * n_steps / horizon)
    where n_steps is the number of episodes in the batch that produced KL.
    """

    value: float
    target: float
    horizon: int

    def update(self, current_kl: float, n_steps: int) -> None:
        proportional_error = min(max(current_kl / self.target - 1.0, -ERROR_CLIP), ERROR_CLIP)
        self.value *= 1.0 + proportional_error * n_steps / self.horizon


def adaptive_reach(total_episodes: int, batch_size: int, horizon: int) -> float:
    """The most the adaptive controller can move its coefficient over a run of E episodes in batches of n, as a
    factor: with x = c·n/H (c = ``ERROR_CLIP``, H the horizon) and u = ⌈E / n⌉ updates, KL held beyond the clip
    every update multiplies beta by (1 + x)^u or divides it by 1 / (1 - x)^u, the larger, so

        R = (1 - x)^(-u)   (infinite when x >= 1: beta can be driven to zero)

    R ≈ exp(c·E/H) for small batches. A target whose run has R near 1 barely steers: whatever the KL, the
    coefficient in force stays within a factor R of where it started.
    """
    if total_episodes < 0 or batch_size <= 0 or horizon <= 0:
        raise ValueError("adaptive_reach needs total_episodes >= 0, batch_size > 0 and horizon > 0, got "
                         f"{total_episodes}, {batch_size}, {horizon}")
    step = ERROR_CLIP * batch_size / horizon
    if step >= 1:
        return math.inf
    return float((1.0 - step) ** -math.ceil(total_episodes / batch_size))


def make_kl_controller(
    kl_coef: float, kl_target: float | None, kl_horizon: int
) -> FixedKLController | AdaptiveKLController:
    """The controller a config asks for: adaptive when a target is given, fixed otherwise."""
    if kl_target is None:
        return FixedKLController(kl_coef)
    return AdaptiveKLController(kl_coef, kl_target, kl_horizon)
