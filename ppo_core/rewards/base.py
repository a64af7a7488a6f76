"""Rewards: what each one reads about a batch of episodes, and what it returns.

A reward is a TRL-style function ``module:function`` (``ppo_core.rewards.functions``) or a sequence-classification
model (``ppo_core.rewards.models``); several are summed with their weights (``ppo_core.rewards.weighted``).
"""

from __future__ import annotations

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
