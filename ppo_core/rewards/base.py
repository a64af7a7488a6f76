"""Rewards: what each one reads about a batch of episodes, loading them by name, and their weighted sum.

A reward is a TRL-style function ``module:function`` (``ppo_core.rewards.functions``) or a sequence-classification
model (``ppo_core.rewards.models``). Several are combined as TRL's GRPOTrainer combines them: a weighted sum
over the rewards that scored the row, where a function may return None for "not applicable".
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from transformers import PreTrainedTokenizerBase, TrainerState

from ppo_core.models.prompt_data import PromptSet


@dataclass(frozen=True)
class RewardInputs:
    """One batch of episodes as every reward may read it: prompts and text, the policy's token ids, and how far the
    run had got when they were sampled."""

    prompts: PromptSet
    completions: list[str]  # each response decoded without padding or special tokens
    completion_ids: list[list[int]]  # each response's token ids, its stop token included
    queries: torch.Tensor  # [B, Q] left-padded prompt ids (the policy's tokenizer)
    query_mask: torch.Tensor
    responses: torch.Tensor  # [B, R] response ids, pad after the stop token
    response_mask: torch.Tensor  # [B, R] True up to and including the stop token
    has_stop: torch.Tensor  # [B]
    tokenizer: PreTrainedTokenizerBase
    # The run's progress when the episodes were sampled, as TRL's GRPOTrainer hands it to reward functions
    # (ppo_core.rewards.functions); None for episodes outside a run, which a reward function then does not get.
    trainer_state: TrainerState | None = None


@dataclass(frozen=True)
class RewardScores:
    """One reward's scores [B], and which rows it scored: a function may answer None for "not applicable"."""

    values: torch.Tensor
    scored: torch.Tensor

    @classmethod
    def every_row(cls, values: torch.Tensor) -> RewardScores:
        return cls(values, torch.ones_like(values, dtype=torch.bool))


class Reward(Protocol):
    """One reward source."""

    name: str  # its metric's name (rewards/<name>)
    spec: str  # what the config named it by: a path or module:function

    def __call__(self, inputs: RewardInputs) -> RewardScores: ...

    def to(self, device: torch.device) -> Reward: ...


class WeightedRewards:
    """sum_k w_k r_k over the rewards that scored the row (TRL's nansum), and each reward on its own."""

    def __init__(self, rewards: Sequence[Reward], weights: Sequence[float] | None = None) -> None:
        self.rewards = list(rewards)
        self.weights = list(weights) if weights is not None else [1.0] * len(self.rewards)
        # Which rewards gave a NaN or infinite score in the latest call, in words: a divergence of the score names
        # them (a NaN in the total alone cannot say whose it was).
        self.non_finite: list[str] = []

    def to(self, device: torch.device) -> WeightedRewards:
        self.rewards = [reward.to(device) for reward in self.rewards]
        return self

    def __call__(self, inputs: RewardInputs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The combined score [B], and each reward's own scores [B] by name with NaN where it gave none.

        score_i = sum_k w_k r_ki over the rewards k that scored row i; a NaN a reward did return stays NaN,
        so a broken reward is caught as a non-finite score rather than read as "no opinion".
        """
        device = inputs.queries.device
        scores = [reward(inputs) for reward in self.rewards]
        values = torch.stack([s.values.to(device=device, dtype=torch.float32) for s in scores], dim=1)
        scored = torch.stack([s.scored.to(device) for s in scores], dim=1)
        weights = torch.tensor(self.weights, dtype=torch.float32, device=device)
        unscored = ~scored.any(dim=1)
        if bool(unscored.any()):
            row = int(unscored.nonzero()[0, 0])
            warnings.warn(f"no reward scored row {row} ({inputs.prompts.texts[row][:80]!r}); it counts as 0, "
                          f"as in TRL", stacklevel=2)
        returned_non_finite = scored & ~torch.isfinite(values)
        self.non_finite = [
            f"reward {reward.spec} returned {float(values[returned_non_finite[:, k], k][0])} for "
            f"{int(returned_non_finite[:, k].sum())} of {len(values)} completions"
            for k, reward in enumerate(self.rewards) if bool(returned_non_finite[:, k].any())
        ]
        total = torch.where(scored, values * weights, torch.zeros_like(values)).sum(dim=1)
        per_reward = {reward.name: torch.where(scored[:, k], values[:, k], torch.full_like(values[:, k], math.nan))
                      for k, reward in enumerate(self.rewards)}
        return total, per_reward
