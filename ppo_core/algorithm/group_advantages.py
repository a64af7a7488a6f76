"""Critic-free advantages from several responses per prompt (GRPO, RLOO, REINFORCE++ with a group baseline).

A batch of P prompts x G responses is laid out prompt by prompt: rows g*G .. g*G + G - 1 answer prompt g. Each
function takes the sequence scores ``[P*G]`` and returns one advantage per response, to be spread over its
tokens by the caller.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch

from ppo_core.algorithm.masked import local
from ppo_core.config.ppo_config import GRPO_STD_EPSILON

ScaleRewards = Literal["group", "batch", "none"]


def grouped(scores: torch.Tensor, group_size: int) -> torch.Tensor:
    """``scores`` [P*G] as [P, G]: one row per prompt."""
    if group_size < 1 or scores.numel() % group_size:
        raise ValueError(f"{scores.numel()} scores do not split into groups of {group_size}")
    return scores.reshape(-1, group_size)


def grpo_advantages(scores: torch.Tensor, group_size: int, scale_rewards: ScaleRewards = "group",
                    scale_rewards_epsilon: float = GRPO_STD_EPSILON,
                    total: Callable[[torch.Tensor], torch.Tensor] = local) -> torch.Tensor:
    """GRPO (Shao et al. 2024): A_i = (r_i - mean_g r) / (s + eps), eps = ``scale_rewards_epsilon`` (the config's;
    verl's ``epsilon`` of compute_grpo_outcome_advantage, a fixed constant in TRL's GRPOTrainer), with s by
    ``scale_rewards``:

    - ``group``: the standard deviation of the response's own group (unbiased, n - 1), GRPO's;
    - ``batch``: the standard deviation over the whole batch (of every process, through ``total``);
    - ``none``: no division, A_i = r_i - mean_g r (Dr. GRPO, Liu et al. 2025).
    """
    groups = grouped(scores, group_size)
    centred = groups - groups.mean(dim=1, keepdim=True)
    if scale_rewards == "none":
        return centred.reshape(-1)
    if scale_rewards == "group":
        spread = groups.std(dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(groups[:, :1])
    else:
        spread = batch_std(scores, total)
    return (centred / (spread + scale_rewards_epsilon)).reshape(-1)


def batch_std(scores: torch.Tensor, total: Callable[[torch.Tensor], torch.Tensor] = local) -> torch.Tensor:
    """s = sqrt(sum_i (r_i - mean r)^2 / (n - 1)) over the scores of every process (``total`` sums over them);
    0 for a single score."""
    count = total(torch.tensor(float(scores.numel()), device=scores.device))
    mean = total(scores.sum()) / count
    variance = total(((scores - mean) ** 2).sum()) / (count - 1).clamp(min=1)
    return variance.sqrt()


def rloo_advantages(scores: torch.Tensor, group_size: int) -> torch.Tensor:
    """RLOO (Ahmadian et al. 2024): A_i = r_i - (sum_{j != i} r_j) / (G - 1), the other responses' mean as the
    baseline; G >= 2."""
    if group_size < 2:
        raise ValueError(f"RLOO needs at least 2 responses per prompt, got {group_size}")
    groups = grouped(scores, group_size)
    others_mean = (groups.sum(dim=1, keepdim=True) - groups) / (group_size - 1)
    return (groups - others_mean).reshape(-1)


def group_mean_baseline(scores: torch.Tensor, group_size: int) -> torch.Tensor:
    """r_i - mean_g r: the score with its group's mean subtracted (REINFORCE++'s baseline variant, before the
    return is whitened over the batch)."""
    groups = grouped(scores, group_size)
    return (groups - groups.mean(dim=1, keepdim=True)).reshape(-1)


def group_reward_stats(scores: torch.Tensor, group_size: int) -> tuple[float, float]:
    """(reward_std, frac_reward_zero_std): the mean over groups of each group's standard deviation (unbiased), and
    the share of groups whose scores are all equal, which give a group estimator no signal."""
    groups = grouped(scores, group_size)
    spread = groups.std(dim=1) if group_size > 1 else torch.zeros(groups.shape[0])
    all_equal = (groups == groups[:, :1]).all(dim=1)
    return float(spread.mean()), float(all_equal.float().mean())
