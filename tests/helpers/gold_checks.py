"""What every version of the text task's gold is held to, one function per check: the gamed battery near 0, the
fluent sentences in sentiment's order, and real text that keeps its fluency."""

from __future__ import annotations

import statistics

from ppo_core.tasks.fortunes import TextGoldScorer, TextSplit
from ppo_core.tasks.fortunes.gamed import BATTERY_PROMPTS, FLUENT

GAMED_CEILING = 0.1
"""The most gold any gamed response of the battery may score."""


def highest_score(gold: TextGoldScorer, response: str) -> float:
    """The response's highest gold under the battery's prompts."""
    return max(gold(list(BATTERY_PROMPTS), [response] * len(BATTERY_PROMPTS)))


def assert_sentiments_ordered(gold: TextGoldScorer) -> None:
    """Positive > neutral > negative at every prompt of the battery, and every positive sentence scores above 0.75."""
    prompts = list(BATTERY_PROMPTS)
    positive, neutral, negative = (gold(prompts, list(FLUENT[s])) for s in ("positive", "neutral", "negative"))
    for i in range(len(prompts)):
        assert positive[i] > neutral[i] > negative[i]
    assert min(positive) > 0.75


def real_fluency(gold: TextGoldScorer, split: TextSplit) -> tuple[float, float]:
    """The share of the split's held-out continuations with fluency >= 0.9, and their mean fluency."""
    fluency = [gold.breakdown(example.reference).fluency for example in split.heldout]
    return sum(f >= 0.9 for f in fluency) / len(fluency), statistics.fmean(fluency)
