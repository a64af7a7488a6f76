"""Per-token KL estimators and the KL-coefficient controllers.

With log r_t = log pi_ref(y_t | s_t) - log pi_theta(y_t | s_t) on tokens sampled from pi_theta,
each estimator's expectation approximates KL(pi_theta || pi_ref) (Schulman, "Approximating KL
Divergence", 2020).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ppo_core.algorithm.kl_reach import ERROR_CLIP


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


def make_kl_controller(
    kl_coefficient: float, kl_target: float | None, kl_horizon: int
) -> FixedKLController | AdaptiveKLController:
    """The controller a config asks for: adaptive when a target is given, fixed otherwise. ``kl_coefficient`` is the
    config's coefficient in force (its ``kl_coefficient``: kl_coef in the reward, beta in the loss)."""
    if kl_target is None:
        return FixedKLController(kl_coefficient)
    return AdaptiveKLController(kl_coefficient, kl_target, kl_horizon)
