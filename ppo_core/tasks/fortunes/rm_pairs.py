"""The proxy reward model's data: responses labelled by gold, as preference pairs.

As in RLHF practice most pairs are responses of the policy PPO starts from, compared by a judge: here the gold scorer
stands in for the people. The proxy learns gold only where the SFT policy writes, from a finite set of pairs, so a
policy pushed far from there finds what the proxy overrates: it is an imperfect, exploitable stand-in for gold.

The companion policy writes word salad, so a proxy trained on its samples alone reads fluent English badly: on
SmolLM2-135M-Instruct's responses its scores had a Spearman correlation of 0.14 with gold (160 responses), no
signal for PPO to climb. :func:`reference_pairs` adds pairs of the corpus's own continuations, which are fluent, as a
preference dataset of human-written comparisons would.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from ppo_core.tasks.fortunes.pairs import DEFAULT_MARGIN, ScoredResponse, TextPreferencePair, preference_pairs
from ppo_core.tasks.fortunes.prompts import TextExample
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


def fit_words(text: str, length: Callable[[str], int], limit: int) -> str:
    """The longest run of ``text``'s first whitespace-separated words (single-spaced) whose ``length`` (in tokens)
    is at most ``limit``: a continuation cut to a response's length, at a word boundary."""
    words = text.split()
    count = min(len(words), limit)
    while count > 0 and length(" ".join(words[:count])) > limit:
        count -= 1
    return " ".join(words[:count])


def reference_pairs(examples: Sequence[TextExample], gold: Callable[[list[str], list[str]], list[float]],
                    count: int, cut: Callable[[str], str], rng: random.Random) -> list[TextPreferencePair]:
    """Up to ``count`` gold-labelled pairs of human continuations: the examples in an order drawn by ``rng``, taken
    two at a time, the second's continuation set under the first's prompt, each cut by ``cut`` to a response's
    length; pairs closer in gold than :data:`DEFAULT_MARGIN` are dropped. Gold reads the response alone, so the
    borrowed continuation is scored as it would be under its own prompt."""
    order = list(examples)
    rng.shuffle(order)
    pairs: list[TextPreferencePair] = []
    for start in range(0, len(order) - 1, 2 * PROMPTS_PER_CHUNK):
        chunk = order[start : start + 2 * PROMPTS_PER_CHUNK]
        firsts, seconds = chunk[0::2], chunk[1::2]
        prompts = [a.prompt for a, _ in zip(firsts, seconds, strict=False) for _ in range(2)]
        responses = [cut(example.reference)
                     for a, b in zip(firsts, seconds, strict=False) for example in (a, b)]
        scores = gold(prompts, responses)
        pairs.extend(preference_pairs([ScoredResponse(p, r, g) for p, r, g in zip(prompts, responses, scores,
                                                                                   strict=True)], DEFAULT_MARGIN))
        if len(pairs) >= count:
            break
    return pairs[:count]
