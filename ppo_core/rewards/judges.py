"""Held-out judges: what scores a run's held-out evaluations, and nothing else.

A reward the policy trains on can be gamed; a judge it never trains on is what tells whether the gain is real
(Gao et al.'s gold reward model; verl's validation reward manager; TRL's pairwise judges and win-rate callback).
Judges come in TRL's conventions:

- pointwise judges, read like rewards: ``module:function`` with GRPOTrainer's signature, or a sequence-classification
  model (``judge_model_path``, ``judge_funcs``, summed with ``judge_weights``). A built-in task's gold is its judge
  when the config names none (:class:`GoldJudge`).
- a pairwise judge (``pairwise_judge``) with TRL's ``BasePairwiseJudge.judge(prompts, completions, shuffle_order)``,
  which says which of two answers to a prompt is better: the policy's answer is set against the reference policy's
  answer to the same held-out prompt, and the share it wins is the policy's win rate.

The trainer's reward never sees a judge, and no training rollout is judged (``ppo_core.run.evaluation``).

Example::

    judges = load_judges(config, task_gold, options, tokenizer)
    if judges is not None and judges.pointwise is not None:
        total, each = judges.pointwise(inputs)
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from ppo_core.config.ppo_config import ConfigError, PPOConfig
from ppo_core.errors import InputError, first_line
from ppo_core.metric_names import GOLD_JUDGE
from ppo_core.models.loading import LoadOptions
from ppo_core.rewards.base import RewardInputs, RewardScores
from ppo_core.rewards.weighted import WeightedRewards, load_rewards

GoldScore = Callable[[list[str], list[str]], list[float]]
"""A built-in task's gold: (prompts, responses) -> one score each."""


class JudgeError(InputError):
    """A pairwise judge raised, or answered something other than one choice per pair."""


class GoldJudge:
    """A built-in task's gold scorer, as a pointwise judge."""

    def __init__(self, gold_score: GoldScore) -> None:
        self.gold_score = gold_score
        self.name = GOLD_JUDGE
        self.spec = "the task's gold"

    def to(self, device: torch.device) -> GoldJudge:
        return self

    def __call__(self, inputs: RewardInputs) -> RewardScores:
        values = self.gold_score(inputs.prompts.texts, inputs.completions)
        return RewardScores.every_row(torch.tensor(values, dtype=torch.float32))


class PairwiseJudge:
    """``module:name`` of a TRL pairwise judge: an object with ``judge(prompts, completions, shuffle_order=True)``
    returning, for each prompt, the index of the better of its two completions (-1 where it could not say), or a
    class of one, built with no arguments."""

    def __init__(self, spec: str) -> None:
        module_name, _, attribute = spec.partition(":")
        if os.getcwd() not in sys.path:  # judge modules live beside the user's config, as reward modules do
            sys.path.append(os.getcwd())
        try:
            module = importlib.import_module(module_name)
        except MemoryError:
            raise
        except Exception as error:
            raise ConfigError(f"pairwise_judge: cannot import module {module_name!r} ({type(error).__name__}: "
                              f"{first_line(error)})") from None
        found = getattr(module, attribute, None)
        if isinstance(found, type):
            found = found()
        judge = getattr(found, "judge", None)
        if not callable(judge):
            raise ConfigError(f"pairwise_judge: {spec!r} is not a pairwise judge (no judge(prompts, completions) "
                              f"method)")
        self.judge: Callable[..., Any] = judge
        self.spec = spec

    def choices(self, prompts: Sequence[str], policy: Sequence[str], reference: Sequence[str]) -> list[int]:
        """The judge's choice for each (policy answer, reference answer) pair: 0 the policy's, 1 the reference's,
        -1 none. The pairs go in that order; ``shuffle_order`` lets a judge undo any bias for the first place, as
        TRL's judges do."""
        pairs = [[mine, theirs] for mine, theirs in zip(policy, reference, strict=True)]
        try:
            output = self.judge(list(prompts), pairs, shuffle_order=True)
        except (MemoryError, torch.OutOfMemoryError):
            raise
        except Exception as error:
            raise JudgeError(f"pairwise judge {self.spec} raised {type(error).__name__}: {first_line(error)}") \
                from None
        choices = list(output) if isinstance(output, Sequence) else None
        if choices is None or len(choices) != len(pairs) or any(choice not in (-1, 0, 1) for choice in choices):
            raise JudgeError(f"pairwise judge {self.spec} returned {str(output)[:80]!r}, expected {len(pairs)} "
                             f"choices of 0, 1 or -1")
        return [int(choice) for choice in choices]


def win_count(choices: Sequence[int]) -> float:
    """w = sum_i ([c_i = 0] + [c_i = -1] / 2): the policy's wins over n pairs, a pair the judge could not decide
    counting as half a win, so that a judge that never decides reads 0.5, as a coin would.

    >>> win_count([0, 0, 1, -1])
    2.5
    """
    return sum(1.0 if choice == 0 else 0.5 if choice == -1 else 0.0 for choice in choices)


@dataclass
class Judges:
    """A run's held-out judges: pointwise (summed with their weights), pairwise, or both."""

    pointwise: WeightedRewards | None
    pairwise: PairwiseJudge | None

    @property
    def names(self) -> list[str]:
        """The pointwise judges' names, in order: their metrics are ``eval/judge/<name>``."""
        return [judge.name for judge in self.pointwise.rewards] if self.pointwise is not None else []


def load_judges(config: PPOConfig, gold_score: GoldScore | None, options: LoadOptions,
                tokenizer: PreTrainedTokenizerBase, names: list[str]) -> Judges | None:
    """The judges ``config`` names (its model paths resolved), else a built-in task's gold; None when there are
    none, or when the run never evaluates. ``names`` are the named judges' metric names
    (``ppo_core.setup.reported_metrics.judge_names``)."""
    if config.eval_steps is None:
        return None
    pointwise = WeightedRewards(load_rewards(config.named_judges, names, options,
                                             config.local_rollout_forward_batch_size, tokenizer),
                                config.judge_weights) if config.named_judges \
        else WeightedRewards([GoldJudge(gold_score)], config.judge_weights) if gold_score is not None else None
    pairwise = PairwiseJudge(config.pairwise_judge) if config.pairwise_judge else None
    if pointwise is None and pairwise is None:
        return None
    return Judges(pointwise, pairwise)
