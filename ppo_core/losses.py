"""The policy losses (Schulman et al. 2017, with DAPO's asymmetric clip) and the value loss over valid response
tokens, with their diagnostics, and the loss aggregations that turn per-token terms into one number."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ppo_core.masked import masked_mean, per_row_sum

LossType = str  # one of ppo_core.config.LOSS_TYPES


def aggregate_loss(per_token: torch.Tensor, response_mask: torch.Tensor, loss_type: LossType,
                   max_length: int) -> torch.Tensor:
    """One number from per-token terms l_it over the valid tokens (m_it = 1) of N responses:

    - token_mean:              sum_it m_it l_it / sum_it m_it                      (DAPO: every token weighs alike)
    - seq_mean_token_mean:     1/N sum_i (sum_t m_it l_it / sum_t m_it)            (GRPO: every response alike)
    - seq_mean_token_sum_norm: 1/N sum_i (sum_t m_it l_it) / L, L = ``max_length`` (Dr. GRPO: a constant divisor,
      so a long response's tokens are not diluted)

    An empty response contributes 0 to the sequence means.
    """
    if loss_type == "token_mean":
        return masked_mean(per_token, response_mask)
    sums = per_row_sum(per_token, response_mask)
    if loss_type == "seq_mean_token_mean":
        return (sums / response_mask.sum(dim=1).clamp(min=1)).mean()
    if loss_type == "seq_mean_token_sum_norm":
        return (sums / max_length).mean()
    raise ValueError(f"loss_type: unknown aggregation {loss_type!r}")


@dataclass
class PolicyLossOutput:
    loss: torch.Tensor
    clipfrac: torch.Tensor
    clip_low: torch.Tensor  # share of tokens held at the lower bound: A < 0 and r < 1 - eps_low
    clip_high: torch.Tensor  # share of tokens held at the upper bound: A > 0 and r > 1 + eps_high
    approxkl: torch.Tensor
    ratio: torch.Tensor  # per-token, for the ratio diagnostics


def clipped_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange: float,
    cliprange_high: float | None = None,
    loss_type: LossType = "token_mean",
    max_length: int | None = None,
) -> PolicyLossOutput:
    """L^CLIP = agg_t max(-A_t r_t, -A_t clip(r_t, 1 - eps_low, 1 + eps_high)),  r_t = exp(log pi - log pi_old),
    with agg the ``loss_type`` aggregation (:func:`aggregate_loss`), eps_low = ``cliprange`` and eps_high =
    ``cliprange_high``, eps_low unless given (DAPO's clip-higher raises it, so that unlikely tokens with positive
    advantage can grow).

    clipfrac = mean_t [clipped term is the larger]; approxkl = mean_t (log r_t)^2 / 2.
    Padded positions get log r_t = 0 before the exp: a large gap there would overflow, and inf * 0 in the
    backward pass is NaN even though the mean never reads the position.
    """
    high = cliprange if cliprange_high is None else cliprange_high
    log_ratio = torch.where(response_mask.bool(), logprobs - old_logprobs, torch.zeros_like(logprobs))
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + high)
    length = max_length if max_length is not None else response_mask.shape[1]
    return PolicyLossOutput(
        loss=aggregate_loss(torch.max(unclipped, clipped), response_mask, loss_type, length),
        clipfrac=masked_mean((clipped > unclipped).float(), response_mask),
        clip_low=masked_mean(((advantages < 0) & (ratio < 1.0 - cliprange)).float(), response_mask),
        clip_high=masked_mean(((advantages > 0) & (ratio > 1.0 + high)).float(), response_mask),
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
