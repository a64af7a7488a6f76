"""The policy losses (Schulman et al. 2017, with DAPO's asymmetric clip) and the value loss over valid response
tokens, with their diagnostics, and the loss aggregations that turn per-token terms into one number."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ppo_core.algorithm.masked import masked_mean, masked_sum, per_row_sum

LossType = str  # one of ppo_core.config.ppo_config.LOSS_TYPES


@dataclass(frozen=True)
class StepTotals:
    """What one optimizer step holds, over every process: a micro-batch's loss is its share of the step's loss, so
    that how a step is split into micro-batches (and processes) changes nothing but memory."""

    tokens: float  # valid response tokens in the step, summed over processes
    rows: float  # responses in the step, summed over processes
    micro_batches: int  # micro-batches per process in the step
    processes: int = 1


def whole_step(response_mask: torch.Tensor) -> StepTotals:
    """The totals of a step that is this one micro-batch on one process."""
    return StepTotals(tokens=float(response_mask.sum()), rows=float(response_mask.shape[0]), micro_batches=1)


def aggregate_loss(per_token: torch.Tensor, response_mask: torch.Tensor, loss_type: LossType, max_length: int,
                   step: StepTotals | None = None) -> torch.Tensor:
    """One micro-batch's share of the step's loss, from per-token terms l_it over its valid tokens (m_it = 1); the
    step's loss is the sum of its micro-batches' shares (averaged over processes, as the gradient all-reduce does):

    - token_mean:              sum_it m_it l_it / T, T the step's valid tokens   (DAPO's, verl's token-mean: every
      token of the step weighs alike)
    - bnpo:                    (sum_it m_it l_it / sum_it m_it) / K, K micro-batches per step   (TRL's bnpo: each
      micro-batch's own token mean; token_mean when a step is one micro-batch)
    - seq_mean_token_mean:     sum_i (sum_t m_it l_it / sum_t m_it) / N, N the step's responses   (GRPO's)
    - seq_mean_token_sum_norm: sum_i (sum_t m_it l_it) / L / N, L = ``max_length``   (Dr. GRPO's constant divisor)

    Each share is multiplied by the process count P, since the all-reduce divides the gradients' sum by P. An empty
    response contributes 0 to the sequence means. ``step`` None: the micro-batch is the whole step.
    """
    step = step or whole_step(response_mask)
    if loss_type == "bnpo":
        return masked_mean(per_token, response_mask) / step.micro_batches
    if loss_type == "token_mean":
        return masked_sum(per_token, response_mask) * step.processes / max(step.tokens, 1.0)
    sums = per_row_sum(per_token, response_mask)
    if loss_type == "seq_mean_token_mean":
        per_response = sums / response_mask.sum(dim=1).clamp(min=1)
    elif loss_type == "seq_mean_token_sum_norm":
        per_response = sums / max_length
    else:
        raise ValueError(f"loss_type: unknown aggregation {loss_type!r}")
    return per_response.sum() * step.processes / max(step.rows, 1.0)


@dataclass
class PolicyLossOutput:
    loss: torch.Tensor
    clipfrac: torch.Tensor
    clip_low: torch.Tensor  # share of tokens held at the lower bound: A < 0 and r < 1 - eps_low
    clip_high: torch.Tensor  # share of tokens held at the upper bound: A > 0 and r > 1 + eps_high
    approxkl: torch.Tensor
    ratio: torch.Tensor  # per-token, for the ratio diagnostics


def importance_log_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor, response_mask: torch.Tensor,
                         level: str = "token") -> torch.Tensor:
    """log r per token, 0 on padding, at the ``importance_sampling_level``:

    - token:        log r_t = log pi(y_t) - log pi_old(y_t)                        (PPO's)
    - sequence:     log r_t = 1/|y| sum_s log r_s on every token of the response   (GSPO; TRL GRPO's "sequence")
    - sequence_sum: log r_t = sum_s log r_s: the whole response's probability ratio (TRL RLOOTrainer's)

    Padded positions get 0 before any exp: a large gap there would overflow, and inf * 0 in the backward pass is NaN
    even though no aggregation reads the position.
    """
    valid = response_mask.bool()
    per_token = torch.where(valid, logprobs - old_logprobs, torch.zeros_like(logprobs))
    if level == "token":
        return per_token
    total = per_token.sum(dim=1, keepdim=True)
    if level == "sequence":
        total = total / response_mask.sum(dim=1, keepdim=True).clamp(min=1)
    elif level != "sequence_sum":
        raise ValueError(f"importance_sampling_level: unknown level {level!r}")
    return torch.where(valid, total.expand_as(per_token), torch.zeros_like(per_token))


def clipped_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_low: float,
    cliprange_high: float | None = None,
    loss_type: LossType = "token_mean",
    max_length: int | None = None,
    step: StepTotals | None = None,
    importance_sampling_level: str = "token",
    dual_clip: float | None = None,
) -> PolicyLossOutput:
    """L^CLIP = agg_t l_t,  l_t = max(-A_t r_t, -A_t clip(r_t, 1 - eps_low, 1 + eps_high)),  with r_t the
    importance ratio at ``importance_sampling_level`` (:func:`importance_log_ratio`), agg the ``loss_type``
    aggregation (:func:`aggregate_loss`, this micro-batch's share of ``step``), eps_low = ``cliprange_low`` and
    eps_high = ``cliprange_high``, eps_low unless given (DAPO's clip-higher raises it, so that unlikely tokens with
    positive advantage can grow). With ``dual_clip`` c (Ye et al. 2020), l_t = min(l_t, -A_t c) where A_t < 0: a
    token whose ratio ran far above 1 with a negative advantage stops pushing.

    ``cliprange_low`` is always the lower bound, the config's ``cliprange_low`` with ``cliprange`` in its place when
    null (:attr:`~ppo_core.config.ppo_config.PPOConfig.clip_bounds` resolves both); ``cliprange_high`` the upper. verl
    calls them ``clip_ratio_low`` / ``clip_ratio_high``, TRL's GRPOConfig ``epsilon`` / ``epsilon_high``, and TRL's
    PPOConfig has the one symmetric ``cliprange``.

    clipfrac = mean_t [clipped term is the larger]; approxkl = mean_t (log r_t)^2 / 2.
    """
    high = cliprange_low if cliprange_high is None else cliprange_high
    log_ratio = importance_log_ratio(logprobs, old_logprobs, response_mask, importance_sampling_level)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - cliprange_low, 1.0 + high)
    per_token = torch.max(unclipped, clipped)
    if dual_clip is not None:
        per_token = torch.where(advantages < 0, torch.min(per_token, -advantages * dual_clip), per_token)
    length = max_length if max_length is not None else response_mask.shape[1]
    return PolicyLossOutput(
        loss=aggregate_loss(per_token, response_mask, loss_type, length, step),
        clipfrac=masked_mean((clipped > unclipped).float(), response_mask),
        clip_low=masked_mean(((advantages < 0) & (ratio < 1.0 - cliprange_low)).float(), response_mask),
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
    step: StepTotals | None = None,
    loss_type: LossType = "token_mean",
) -> tuple[torch.Tensor, torch.Tensor]:
    """L^V = 1/2 agg_t max((V_t - R_t)^2, (V_old,t + clip(V_t - V_old,t, -eps_v, eps_v) - R_t)^2), agg a token
    mean: over the step's tokens (token_mean, verl's critic), or each micro-batch's own (bnpo, TRL's PPOTrainer).
    The sequence aggregations are the policy's: the value loss stays a token mean under them.

    Returns ``(loss, clipfrac)`` where clipfrac is the fraction of tokens whose clipped error is the larger.
    """
    clipped_values = old_values + torch.clamp(values - old_values, -cliprange_value, cliprange_value)
    unclipped_error = (values - returns) ** 2
    clipped_error = (clipped_values - returns) ** 2
    aggregation = "bnpo" if loss_type == "bnpo" else "token_mean"
    loss = 0.5 * aggregate_loss(torch.max(unclipped_error, clipped_error), response_mask, aggregation, 1, step)
    clipfrac = masked_mean((clipped_error > unclipped_error).float(), response_mask)
    return loss, clipfrac


def entropy_from_log_probs(log_probs: torch.Tensor) -> torch.Tensor:
    """H_t = -sum_v p_tv log p_tv, from log-probabilities already normalised over the vocabulary."""
    return -(log_probs.exp() * log_probs).sum(dim=-1)
