"""The text task's third gold (version 3): the word-order measure against a slow reference and by hand, and the word
salads version 2 let through. What every version keeps, and how each extends the one before, is
test_text_task_gold_versions.py's."""

from __future__ import annotations

import math

import pytest
from helpers.gold_checks import GAMED_CEILING, SALAD, gold_of

from ppo_core.tasks.fortunes import (
    CorpusCounts,
    TextGoldScorer,
    words,
)
from ppo_core.tasks.fortunes.fluency import SHRINK, pair_shortfall
from ppo_core.tasks.fortunes.gamed import (
    BATTERY_PROMPTS,
    GAMED,
    ORDER_KINDS,
)
from ppo_core.tasks.fortunes.words import LeaveOneOut

HAND_CORPUS = [
    "The cat sat on the mat.",
    "The dog sat on the log, and the cat sat on the dog.",
    "A cat is not a dog; a dog is not a log.",
    "Don't let the dog out, said the man.",
    "The man sat down and the dog sat up.",
]

# --- the word-order measure ---------------------------------------------------------------------------------------


def slow_shortfall(tokens: list[str], texts: list[str], alpha: float = 1.0) -> float:
    """Recount every word and adjacent pair of ``texts`` for each pair of ``tokens``, then average the shortfalls."""
    corpus = [words(text) for text in texts]
    total = sum(len(text) for text in corpus)
    shortfalls = []
    for first, second in [(tokens[i], tokens[i + 1]) for i in range(len(tokens) - 1)]:
        seen = sum(1 for text in corpus for i in range(len(text) - 1) if (text[i], text[i + 1]) == (first, second))
        expected = sum(text.count(first) for text in corpus) * sum(text.count(second) for text in corpus) / total
        shortfalls.append(max(0.0, math.log((expected + alpha) / (seen + alpha))))
    return sum(shortfalls) / (len(shortfalls) + SHRINK)


@pytest.mark.parametrize("text", [
    "", "the", "the cat sat on the mat", "the the the", "mat the on sat cat the", "zorgle the dog", "a dog is a log",
    "the dog the cat the man the log", "sat sat on on the the",
])
@pytest.mark.parametrize("alpha", [0.5, 1.0, 4.0])
def test_pair_shortfall_matches_the_slow_reference(text: str, alpha: float) -> None:
    counts = CorpusCounts.from_texts(HAND_CORPUS)
    assert pair_shortfall(words(text), counts, alpha) == pytest.approx(slow_shortfall(words(text), HAND_CORPUS, alpha))


def test_pair_shortfall_by_hand() -> None:
    # x 3 times, y 3 times in 6 words: each pair is expected 3 * 3 / 6 = 1.5 times. "x y" and "y x" are seen twice,
    # "x x" never.
    counts = CorpusCounts.from_texts(["x y x y", "y x"])
    assert pair_shortfall(["x", "y"], counts) == 0.0  # seen more often than expected: no credit, no cost
    assert pair_shortfall(["x", "x"], counts) == pytest.approx(math.log(2.5 / 1) / (1 + SHRINK))
    assert pair_shortfall(["x", "x", "y"], counts) == pytest.approx(math.log(2.5) / (2 + SHRINK))
    # A word the corpus never saw is expected 0 times beside any other: the corpus cannot judge it.
    assert pair_shortfall(["x", "zorgle", "y"], counts) == 0.0
    assert pair_shortfall([], counts) == pair_shortfall(["x"], counts) == 0.0


def test_pair_shortfall_reads_the_counts_it_is_given() -> None:
    # Calibration measures each text against the others (LeaveOneOut); an empty rest of the corpus cannot judge.
    counts = CorpusCounts.from_texts(["the cat sat"])
    assert pair_shortfall(["the", "the"], LeaveOneOut(counts, "the cat sat")) == 0.0
    corpus = CorpusCounts.from_texts(HAND_CORPUS)
    others = CorpusCounts.from_texts(HAND_CORPUS[1:])
    tokens = words("the the cat on on the")
    assert pair_shortfall(tokens, LeaveOneOut(corpus, HAND_CORPUS[0])) == pytest.approx(pair_shortfall(tokens, others))


# --- gold on the battery and on real text -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def golds() -> dict[int, TextGoldScorer]:
    return {version: gold_of(version) for version in (2, 3)}


def test_the_second_gold_is_fooled_by_function_words_in_no_order(golds: dict[int, TextGoldScorer]) -> None:
    # The defect version 3 fixes: every pair of the salad is common English, so version 2 scored it fluent.
    assert golds[2]([BATTERY_PROMPTS[0]], [SALAD])[0] > 0.9
    assert golds[3]([BATTERY_PROMPTS[0]], [SALAD])[0] <= GAMED_CEILING
    fooled = [r for kind in ORDER_KINDS for r in GAMED[kind] if golds[2]([BATTERY_PROMPTS[0]], [r])[0] > GAMED_CEILING]
    assert len(fooled) >= len(GAMED["function-word salad"])
