"""Several rewards summed with their weights, as TRL's GRPOTrainer sums them: over the rewards that scored the row,
where a function may return None for "not applicable" (:class:`WeightedRewards`); and loaded from the specs a config
names, in order, each a ``module:function`` (:mod:`ppo_core.rewards.functions`) or a sequence-classification model
(:mod:`ppo_core.rewards.models`) (:func:`load_rewards`). A run's rewards and its pointwise judges load alike.

Example::

    rewards = WeightedRewards(load_rewards(config.named_rewards, reward_names(config), options,
                                           config.local_rollout_forward_batch_size, tokenizer), config.reward_weights)
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence

import torch
from transformers import PreTrainedTokenizerBase

from ppo_core.models.loading import LoadOptions
from ppo_core.models.paths import is_function_spec
from ppo_core.rewards.base import Reward, RewardInputs
from ppo_core.rewards.functions import FunctionReward
from ppo_core.rewards.models import SequenceClassifierReward


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


def load_rewards(specs: Sequence[tuple[str, str]], names: Sequence[str], options: LoadOptions, batch_size: int,
                 tokenizer: PreTrainedTokenizerBase,
                 reward_text: Callable[[str, str], str] | None = None) -> list[Reward]:
    """One reward per ``(field, spec)``, in order, a model's path as it loads
    (``ppo_core.models.paths.resolve_models``). ``names`` are their metric names, distinct, which the specs as the
    user wrote them give (a GGUF keeps its file's name, not its cache directory's:
    ``ppo_core.setup.reported_metrics``). ``reward_text``: the text a model reads instead of the episode (a built-in
    task's)."""
    rewards: list[Reward] = []
    for (field_name, spec), name in zip(specs, names, strict=True):
        if is_function_spec(spec):
            function = FunctionReward(spec, field_name)
            function.name = name  # distinct: two rewards of one name would share one metric
            rewards.append(function)
        else:
            rewards.append(SequenceClassifierReward(spec, options, batch_size, tokenizer, reward_text, name=name))
    return rewards


__all__ = ["WeightedRewards", "load_rewards"]
