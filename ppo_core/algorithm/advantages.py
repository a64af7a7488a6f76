"""Reward shaping, generalized advantage estimation and discounted returns over right-padded response tokens."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ppo_core.algorithm.masked import local, masked_whiten


def last_token_index(response_mask: torch.Tensor) -> torch.Tensor:
    """Index of each row's last valid token (0 for an empty row)."""
    return (response_mask.long().sum(dim=1) - 1).clamp(min=0)


def kl_penalty(kl: torch.Tensor, kl_coef: float, response_mask: torch.Tensor) -> torch.Tensor:
    """r^KL_t = -beta * KL_t on valid tokens, 0 on padding: the per-token reward KL in the reward adds (the
    estimators' ``kl_rewards``), beta the config's in-reward ``kl_coef``."""
    return torch.where(response_mask.bool(), -kl_coef * kl, torch.zeros_like(kl))


def add_scores(token_rewards: torch.Tensor, scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """r_t + [t = T_i] score_i: each sequence's score added on its last valid token T_i (a new tensor)."""
    rewards = token_rewards.clone()
    rows = torch.arange(rewards.shape[0], device=rewards.device)
    rewards[rows, last_token_index(response_mask)] += scores.to(rewards.dtype)
    return rewards


def shape_rewards(
    scores: torch.Tensor, kl: torch.Tensor, kl_coef: float, response_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token reward r_t = -beta * KL_t, plus the sequence score on the last response token.

    Returns ``(rewards, kl_rewards)``, both zero on padded positions (``kl_rewards`` is TRL's non_score_reward).
    """
    kl_rewards = kl_penalty(kl, kl_coef, response_mask)
    return add_scores(kl_rewards, scores, response_mask), kl_rewards


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation (Schulman et al. 2016).

    delta_t = r_t + gamma * V_{t+1} - V_t
    A_t     = delta_t + gamma * lam * A_{t+1}
    R_t     = A_t + V_t            (the value targets)

    V and A are 0 past the last valid token, so the episode ends there. Returns
    ``(advantages, returns)``, both zero on padded positions.
    """
    valid = response_mask.bool()
    rewards = torch.where(valid, rewards, torch.zeros_like(rewards))
    values = torch.where(valid, values, torch.zeros_like(values))
    length = rewards.shape[1]
    advantages_reversed = []
    next_advantage = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(length)):
        next_value = values[:, t + 1] if t + 1 < length else torch.zeros_like(values[:, t])
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        next_advantage = torch.where(valid[:, t], delta + gamma * lam * next_advantage, 0.0)
        advantages_reversed.append(next_advantage)
    advantages = torch.stack(advantages_reversed[::-1], dim=1)
    returns = torch.where(valid, advantages + values, torch.zeros_like(values))
    return advantages, returns


def discounted_returns(rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """G_t = r_t + gamma * G_{t+1}, with G = 0 past the last valid token: the Monte-Carlo return of each token
    (REINFORCE's, without a value network). Zero on padded positions."""
    valid = response_mask.bool()
    rewards = torch.where(valid, rewards, torch.zeros_like(rewards))
    returns = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.shape[1])):
        running = torch.where(valid[:, t], rewards[:, t] + gamma * running, 0.0)
        returns[:, t] = running
    return returns


def whiten_advantages(advantages: torch.Tensor, response_mask: torch.Tensor,
                      total: Callable[[torch.Tensor], torch.Tensor] = local) -> torch.Tensor:
    """A <- (A - mean A) / std A over the valid tokens of the rollout batch (of every rank, through ``total``)."""
    return masked_whiten(advantages, response_mask, shift_mean=True, total=total)


def whiten_rewards(rewards: torch.Tensor, response_mask: torch.Tensor,
                   total: Callable[[torch.Tensor], torch.Tensor] = local) -> torch.Tensor:
    """r <- (r - mean r) / std r + mean r: rescaled, keeping the mean reward."""
    return masked_whiten(rewards, response_mask, shift_mean=False, total=total)
