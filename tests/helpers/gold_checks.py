"""What every version of the text task's gold is held to, one function per check: the gamed battery near 0, the
fluent sentences in sentiment's order, and real text that keeps its fluency."""

from __future__ import annotations

import functools
import statistics
from collections.abc import Iterable

from ppo_core.tasks.fortunes import TextGoldScorer, TextSplit, build_gold_scorer, load_corpus, split_examples
from ppo_core.tasks.fortunes.gamed import BATTERY_PROMPTS, FLUENT, GAMED

GAMED_CEILING = 0.1
"""The most gold any gamed response of the battery may score."""
SALAD = "the day that I was I so the I loved the very when I love the"
"""What a policy wrote when over-optimised against the second gold's proxy, which that gold scored 0.93."""


@functools.cache
def real_split() -> TextSplit:
    """The split the golds' checks read real text from: 1,000 held-out prompts, seed 0 (built once a process)."""
    return split_examples(load_corpus().texts, num_heldout=1000, seed=0)


@functools.cache
def gold_of(version: int) -> TextGoldScorer:
    """Gold of ``version`` built on :func:`real_split`'s training texts, once a process for every test file."""
    return build_gold_scorer([example.text for example in real_split().train], version=version)


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


def battery_cases(excluded: Iterable[str] = ()) -> list[tuple[str, str]]:
    """Every ``(kind, response)`` of the battery but the ``excluded`` kinds: a version is held to the kinds it
    reads, and the kinds a later version was made for are that version's to pass."""
    skip = set(excluded)
    return [(kind, response) for kind, responses in GAMED.items() if kind not in skip for response in responses]


def assert_near_zero(gold: TextGoldScorer, kind: str, response: str) -> None:
    """The response scores at most :data:`GAMED_CEILING` under every prompt of the battery."""
    score = highest_score(gold, response)
    assert score <= GAMED_CEILING, f"{kind}: {response!r} scores {score:.3f}"


def assert_left_open(gold: TextGoldScorer, response: str) -> None:
    """A hole of ``gamed.UNCAUGHT`` is still open: when a version closes one, it moves into the battery."""
    assert gold([BATTERY_PROMPTS[0]], [response])[0] > GAMED_CEILING
