"""Rewards loaded from the specs a config names, in order: a ``module:function`` (:mod:`ppo_core.rewards.functions`)
or a sequence-classification model (:mod:`ppo_core.rewards.models`), weighted. A run's rewards and its pointwise
judges load alike.

Example::

    rewards = weighted_rewards(config.named_rewards, reward_names(config), config.reward_weights, options,
                               config.local_rollout_forward_batch_size, tokenizer)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from transformers import PreTrainedTokenizerBase

from ppo_core.models.loading import LoadOptions
from ppo_core.models.paths import is_function_spec
from ppo_core.rewards.base import Reward, WeightedRewards
from ppo_core.rewards.functions import FunctionReward
from ppo_core.rewards.models import SequenceClassifierReward


def weighted_rewards(specs: Sequence[tuple[str, str]], names: Sequence[str] | None, weights: Sequence[float] | None,
                     options: LoadOptions, batch_size: int, tokenizer: PreTrainedTokenizerBase,
                     reward_text: Callable[[str, str], str] | None = None) -> WeightedRewards:
    """One reward per ``(field, spec)``, a model's path as it loads (``ppo_core.models.paths.resolve_models``),
    summed with ``weights``. ``names`` are their metric names, which the specs as the user wrote them give (a GGUF
    keeps its file's name, not its cache directory's: ``ppo_core.setup.reported_metrics``); None keeps each one's
    own. ``reward_text``: the text a model reads instead of the episode (a built-in task's)."""
    rewards: list[Reward] = [
        FunctionReward(spec, field_name) if is_function_spec(spec)
        else SequenceClassifierReward(spec, options, batch_size, tokenizer, reward_text=reward_text)
        for field_name, spec in specs
    ]
    for reward, name in zip(rewards, names if names is not None else [reward.name for reward in rewards],
                            strict=True):
        reward.name = name  # distinct: two rewards of one name would share one metric
    return WeightedRewards(rewards, weights)


__all__ = ["weighted_rewards"]
