"""One micro-batch's share of the policy objective: the clipped policy loss, minus the entropy bonus, plus the KL
loss term where KL is not in the reward (GRPO's placement), every term aggregated alike (``loss_type``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ppo_core.algorithm.kl import kl_per_token
from ppo_core.algorithm.losses import PolicyLossOutput, StepTotals, aggregate_loss, clipped_policy_loss
from ppo_core.algorithm.masked import masked_mean
from ppo_core.config.ppo_config import PPOConfig


@dataclass
class PolicyObjective:
    loss: torch.Tensor  # this micro-batch's share of the step's objective, to backpropagate
    policy: PolicyLossOutput
    kl: torch.Tensor | None  # the aggregated KL loss term (before beta); None when KL is in the reward
    entropy: torch.Tensor  # the micro-batch's mean token entropy, a diagnostic


def policy_objective(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    entropy: torch.Tensor,
    config: PPOConfig,
    kl_loss_coef: float | None,
    step: StepTotals | None = None,
    max_length: int | None = None,
) -> PolicyObjective:
    """J = agg_t l^CLIP_t - c_H agg_t H_t + beta agg_t KL_t, with agg the ``loss_type`` aggregation, l^CLIP the
    clipped policy loss at the config's clip bounds, importance level and dual clip
    (:func:`~ppo_core.algorithm.losses.clipped_policy_loss`), H_t the per-token ``entropy`` [B, R], c_H = entropy_coef,
    and KL_t = kl_per_token(log pi, log pi_ref, kl_loss_estimator) when ``kl_loss_coef`` (beta) is given. verl
    aggregates its entropy and KL loss terms as its policy loss; TRL adds beta KL_t to the per-token loss before
    aggregating, which is the same sum.
    """
    length = max_length if max_length is not None else response_mask.shape[1]
    low, high = config.clip_bounds
    policy = clipped_policy_loss(logprobs, old_logprobs, advantages, response_mask, low, high, config.loss_type,
                                 length, step, config.importance_sampling_level, config.dual_clip)
    loss = policy.loss
    if config.entropy_coef != 0:
        loss = loss - config.entropy_coef * aggregate_loss(entropy, response_mask, config.loss_type, length, step)
    kl = None
    if kl_loss_coef is not None:
        if ref_logprobs is None:
            raise ValueError("a KL loss term needs the reference log-probabilities")
        kl = aggregate_loss(kl_per_token(logprobs, ref_logprobs, config.kl_loss_estimator), response_mask,
                            config.loss_type, length, step)
        loss = loss + kl_loss_coef * kl
    return PolicyObjective(loss=loss, policy=policy, kl=kl, entropy=masked_mean(entropy.detach(), response_mask))
