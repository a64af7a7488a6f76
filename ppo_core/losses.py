"""The PPO losses (Schulman et al. 2017) over valid response tokens, with their diagnostics."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ppo_core.masked import masked_mean


@dataclass
class PolicyLossOutput:
    loss: torch.Tensor
    clipfrac: torch.Tensor
    approxkl: torch.Tensor
    ratio: torch.Tensor  # per-token, for the ratio diagnostics


def clipped_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange: float,
) -> PolicyLossOutput:
    """L^CLIP = mean_t max(-A_t r_t, -A_t clip(r_t, 1 - eps, 1 + eps)),  r_t = exp(log pi - log pi_old).

    clipfrac = mean_t [clipped term is the larger]; approxkl = mean_t (log r_t)^2 / 2.
    Padded positions get log r_t = 0 before the exp: a large gap there would overflow, and inf * 0 in the
    backward pass is NaN even though the mean never reads the position.
    """
    log_ratio = torch.where(response_mask.bool(), logprobs - old_logprobs, torch.zeros_like(logprobs))
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    return PolicyLossOutput(
        loss=masked_mean(torch.max(unclipped, clipped), response_mask),
        clipfrac=masked_mean((clipped > unclipped).float(), response_mask),
        approxkl=masked_mean(0.5 * log_ratio**2, response_mask),
        ratio=ratio,
    )


def clipped_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """L^V = 1/2 mean_t max((V_t - R_t)^2, (V_old,t + clip(V_t - V_old,t, -eps_v, eps_v) - R_t)^2).

    Returns ``(loss, clipfrac)`` where clipfrac is the fraction of tokens whose clipped error is the larger.
    """
    clipped_values = old_values + torch.clamp(values - old_values, -cliprange_value, cliprange_value)
    unclipped_error = (values - returns) ** 2
    clipped_error = (clipped_values - returns) ** 2
    loss = 0.5 * masked_mean(torch.max(unclipped_error, clipped_error), response_mask)
    clipfrac = masked_mean((clipped_error > unclipped_error).float(), response_mask)
    return loss, clipfrac


def entropy_from_log_probs(log_probs: torch.Tensor) -> torch.Tensor:
    """H_t = -sum_v p_tv log p_tv, from log-probabilities already normalised over the vocabulary."""
    return -(log_probs.exp() * log_probs).sum(dim=-1)
