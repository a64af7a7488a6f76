"""The advantage estimators by name: the config's ``advantage_estimator`` picks one. Adding one is its traits in
``ppo_core.config.estimator_traits`` (torch-free: what the config, the metrics, the search space and the exports read)
and its function here, registered with :func:`estimator` under the same name.

Each takes an :class:`AdvantageInputs` and returns per-token advantages [B, R], plus the value targets for GAE (the
only estimator with a value network; the others return None). KL already sits in ``token_rewards`` when the config
puts it in the reward, so every estimator sees the penalised reward r_t = -beta KL_t (+ the score on the last token).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ppo_core.algorithm.advantages import add_scores, discounted_returns, gae, whiten_advantages, whiten_rewards
from ppo_core.algorithm.group_advantages import (
    ScaleRewards,
    group_mean_baseline,
    grpo_advantages,
    rloo_advantages,
)
from ppo_core.algorithm.masked import local, per_row_sum
from ppo_core.config.estimator_traits import ESTIMATORS as TRAITS
from ppo_core.config.ppo_config import GRPO_STD_EPSILON


@dataclass(frozen=True)
class AdvantageInputs:
    """What an estimator reads of one rollout batch, laid out as P prompts x G responses (rows g*G .. g*G+G-1
    answer prompt g).

    The settings carry the config's names (:class:`~ppo_core.config.ppo_config.PPOConfig`). Where a peer's differ:
    ``kl_rewards`` is TRL PPOTrainer's ``non_score_reward`` (whose batch mean TRL logs as
    ``objective/non_score_reward``, a metric name kept); ``whiten_advantages`` is an option TRL's PPOTrainer and
    verl's GAE do not have (both always whiten); ``scale_rewards_epsilon`` is verl's ``epsilon`` of
    ``compute_grpo_outcome_advantage`` (1e-6), a constant in TRL's GRPOTrainer (1e-4) and OpenRLHF's group_norm
    (1e-9)."""

    scores: torch.Tensor  # [B] sequence scores
    kl_rewards: torch.Tensor  # [B, R] the per-token KL penalty -beta KL_t when KL is in the reward, else zeros
    values: torch.Tensor | None  # [B, R] V(s_t), GAE only
    response_mask: torch.Tensor  # [B, R]
    group_size: int  # G
    gamma: float
    lam: float
    whiten_advantages: bool  # GAE's
    whiten_rewards: bool  # GAE's
    scale_rewards: ScaleRewards  # GRPO's
    scale_rewards_epsilon: float = GRPO_STD_EPSILON  # GRPO's, added to the standard deviation
    total: Callable[[torch.Tensor], torch.Tensor] = local  # sums a statistic over every process

    def token_rewards(self, scores: torch.Tensor) -> torch.Tensor:
        """r_t = kl_rewards_t, plus ``scores`` on each response's last token."""
        return add_scores(self.kl_rewards, scores, self.response_mask)

    def sequence_rewards(self) -> torch.Tensor:
        """R_i = score_i + sum_t kl_rewards_it: the penalised reward of each whole response (RLOO's, and GRPO's
        when KL is in the reward)."""
        return self.scores.to(self.kl_rewards.dtype) + per_row_sum(self.kl_rewards, self.response_mask)

    def over_tokens(self, per_response: torch.Tensor) -> torch.Tensor:
        """A_it = A_i on every valid token of response i, 0 on padding."""
        spread = per_response[:, None].expand_as(self.kl_rewards)
        return torch.where(self.response_mask.bool(), spread, torch.zeros_like(self.kl_rewards))


Estimator = Callable[[AdvantageInputs], tuple[torch.Tensor, torch.Tensor | None]]
ESTIMATORS: dict[str, Estimator] = {}


def estimator(name: str) -> Callable[[Estimator], Estimator]:
    """Register ``name``'s estimator; its traits must be in ``ppo_core.config.estimator_traits.ESTIMATORS`` first, the
    one table the config, the metrics, the search space and the exports read."""
    if name not in TRAITS:
        raise ValueError(f"estimator {name!r}: register its traits in "
                         "ppo_core.config.estimator_traits.ESTIMATORS first")

    def register(function: Estimator) -> Estimator:
        ESTIMATORS[name] = function
        return function
    return register


@estimator("gae")
def gae_estimator(inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor | None]:
    """PPO's: GAE(gamma, lam) over the token rewards (rescaled first under whiten_rewards) and the value network's
    V, the advantages whitened over the batch when asked; the returns are the value targets."""
    if inputs.values is None:
        raise ValueError("gae needs the value network's values")
    rewards = inputs.token_rewards(inputs.scores)
    if inputs.whiten_rewards:
        rewards = whiten_rewards(rewards, inputs.response_mask, inputs.total)
    advantages, returns = gae(rewards, inputs.values, inputs.response_mask, inputs.gamma, inputs.lam)
    if inputs.whiten_advantages:
        advantages = whiten_advantages(advantages, inputs.response_mask, inputs.total)
    return advantages, returns


@estimator("grpo")
def grpo_estimator(inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor | None]:
    """GRPO: each response's penalised reward R_i, centred on its group's mean and scaled by ``scale_rewards``
    (:func:`~ppo_core.algorithm.group_advantages.grpo_advantages`), on every token of the response."""
    advantages = grpo_advantages(inputs.sequence_rewards(), inputs.group_size, inputs.scale_rewards,
                                 inputs.scale_rewards_epsilon, inputs.total)
    return inputs.over_tokens(advantages), None


@estimator("rloo")
def rloo_estimator(inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor | None]:
    """RLOO: R_i minus the mean of the other responses to the same prompt, on every token of the response."""
    return inputs.over_tokens(rloo_advantages(inputs.sequence_rewards(), inputs.group_size)), None


@estimator("reinforce_pp")
def reinforce_pp_estimator(inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor | None]:
    """REINFORCE++ (Hu 2025): A_t = whiten(G_t) over the batch's tokens, G_t = sum_{s >= t} gamma^(s-t) r_s the
    return of the token rewards (the score on the last token, the KL penalty on each)."""
    returns = discounted_returns(inputs.token_rewards(inputs.scores), inputs.response_mask, inputs.gamma)
    return whiten_advantages(returns, inputs.response_mask, inputs.total), None


@estimator("reinforce_pp_baseline")
def reinforce_pp_baseline_estimator(inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor | None]:
    """REINFORCE++-baseline: as REINFORCE++, with each score first reduced by its group's mean score."""
    centred = group_mean_baseline(inputs.scores, inputs.group_size)
    returns = discounted_returns(inputs.token_rewards(centred), inputs.response_mask, inputs.gamma)
    return whiten_advantages(returns, inputs.response_mask, inputs.total), None


_UNREGISTERED = set(TRAITS) - set(ESTIMATORS)
if _UNREGISTERED:  # a name the table lists and nothing computes: refused at import, not at the first update
    raise ImportError(f"ppo_core.config.estimator_traits lists {', '.join(sorted(_UNREGISTERED))}, which "
                      "ppo_core.algorithm.estimators has no function for")


def estimate_advantages(name: str, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Advantages (and GAE's value targets) by the estimator called ``name``."""
    return ESTIMATORS[name](inputs)
