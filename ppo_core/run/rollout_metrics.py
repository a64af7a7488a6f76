"""The per-update metrics that describe a rollout, under TRL's names."""

from __future__ import annotations

import math

import torch

from ppo_core.algorithm.group_advantages import group_reward_stats
from ppo_core.algorithm.masked import masked_mean, masked_var, per_row_sum
from ppo_core.metric_names import FRAC_REWARD_ZERO_STD, GOLD_SCORE, REWARD_STD
from ppo_core.rollout.collect import Rollout


def rollout_metrics(
    rollout: Rollout, kl: torch.Tensor, kl_rewards: torch.Tensor, returns: torch.Tensor | None,
    group_size: int = 1,
) -> dict[str, float]:
    """KL, entropy and reward of a rollout batch; sequence-level sums averaged over the batch, as TRL logs them.
    The value network's metrics come with values and returns (GAE), the group metrics with groups of G > 1.

    ``kl_rewards`` [B, R] is the per-token KL penalty in the reward (the estimators' ``kl_rewards``, zeros when KL is
    in the loss): TRL calls it ``non_score_reward``, and its per-response sum, averaged, is reported under TRL's
    metric name ``objective/non_score_reward``."""
    mask = rollout.response_mask
    mean_kl = per_row_sum(kl, mask).mean()
    mean_kl_reward = per_row_sum(kl_rewards, mask).mean()  # TRL's objective/non_score_reward
    mean_score = rollout.scores.mean()
    metrics = {
        "objective/kl": float(mean_kl),
        "objective/entropy": float(per_row_sum(-rollout.logprobs, mask).mean()),
        "objective/non_score_reward": float(mean_kl_reward),
        "objective/rlhf_reward": float(mean_score + mean_kl_reward),
        "objective/scores": float(mean_score),
        "objective/scores_std": float(rollout.scores.std()) if len(rollout.scores) > 1 else 0.0,
        "objective/response_length": float(mask.sum(dim=1).float().mean()),
        "val/num_eos_tokens": float(rollout.has_stop.sum()),
    }
    if rollout.values is not None and returns is not None:
        explained = 1.0 - masked_var(returns - rollout.values, mask) / masked_var(returns, mask).clamp(min=1e-8)
        metrics["val/mean_value"] = float(masked_mean(rollout.values, mask))
        metrics["val/explained_variance"] = float(explained)
    if group_size > 1:
        metrics[REWARD_STD], metrics[FRAC_REWARD_ZERO_STD] = group_reward_stats(rollout.scores.float().cpu(),
                                                                              group_size)
    if rollout.gold_scores is not None:
        metrics[GOLD_SCORE] = float(rollout.gold_scores.mean())
    return metrics


def first_non_finite(metrics: dict[str, float], names: tuple[str, ...]) -> str | None:
    """The first of ``names`` whose value is NaN or infinite."""
    for name in names:
        value = metrics.get(name)
        if value is not None and not math.isfinite(value):
            return name
    return None
