"""The proxy reward model's data: the SFT policy's own samples, labelled by gold, as preference pairs.

As in RLHF practice the pairs are responses of the policy PPO starts from, compared by a judge: here the gold scorer
stands in for the people. The proxy learns gold only where the SFT policy writes, from a finite set of pairs, so a
policy pushed far from there finds what the proxy overrates: it is an imperfect, exploitable stand-in for gold.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from ppo_core.tasks.fortunes.pairs import DEFAULT_MARGIN, ScoredResponse, TextPreferencePair, preference_pairs
from ppo_core.tasks.sampling import sample_responses_cached

PROMPTS_PER_CHUNK = 256
"""Prompts sampled for at a time: enough for a full batch, few enough not to sample far past the pairs wanted."""

SAMPLING_TEMPERATURE = 1.0
"""The SFT policy's own distribution, where PPO starts."""


def sample_gold_pairs(
    policy: PreTrainedModel,
    tokenizer: PreTrainedTokenizerFast,
    gold: Callable[[list[str], list[str]], list[float]],
    prompts: Sequence[str],
    count: int,
    responses_per_prompt: int,
    max_new_tokens: int,
    generator: torch.Generator,
) -> tuple[list[TextPreferencePair], int]:
    """Up to ``count`` gold-labelled pairs from ``responses_per_prompt`` samples of each prompt, taken in order a
    chunk at a time; returns the pairs and how many prompts were used (fewer pairs only when the prompts run out).

    Pairs closer in gold than :data:`DEFAULT_MARGIN` are dropped (see :func:`preference_pairs`).
    """
    pairs: list[TextPreferencePair] = []
    used = 0
    while len(pairs) < count and used < len(prompts):
        chunk = prompts[used : used + PROMPTS_PER_CHUNK]
        used += len(chunk)
        # A prompt's samples sit together, so preference_pairs pairs them with each other.
        batch = [prompt for prompt in chunk for _ in range(responses_per_prompt)]
        responses = sample_responses_cached(policy, tokenizer, batch, SAMPLING_TEMPERATURE, max_new_tokens, generator)
        scored = [ScoredResponse(p, r, g) for p, r, g in zip(batch, responses, gold(batch, responses), strict=True)]
        pairs.extend(preference_pairs(scored, DEFAULT_MARGIN))
    return pairs[:count], used
