"""The judge-free signals of reward hacking (ppo_core/run/hacking_signals.py) against slow, obvious references, on
hand-made answers, random ones and the edge cases: no answers, empty ones, one-word ones."""

from __future__ import annotations

import doctest
import math
import random

import pytest

from ppo_core.metric_names import EVAL_AT_LIMIT, EVAL_DISTINCT_2, EVAL_REPEATED_3, HACKING_SIGNALS
from ppo_core.run import hacking_signals
from ppo_core.run.hacking_signals import (
    at_length_limit,
    distinct_ngrams,
    mean_token_nll,
    repeated_ngrams,
    text_signals,
    words,
)


def slow_words(text: str) -> list[str]:
    """Character by character: letters and digits make a word, an apostrophe joins two words' letters, anything
    else ends the word."""
    out, current = [], ""
    lowered = text.lower()
    for i, char in enumerate(lowered):
        inside = 0 < i < len(lowered) - 1 and lowered[i - 1].isalnum() and lowered[i + 1].isalnum()
        if char.isalnum() or (char in "'’" and current and inside):
            current += char
        else:
            if current:
                out.append(current)
            current = ""
    return [*out, current] if current else out


def slow_grams(text: str, n: int) -> list[list[str]]:
    tokens = slow_words(text)
    return [tokens[i : i + n] for i in range(len(tokens) - n + 1)]


def slow_distinct(texts: list[str], n: int) -> float:
    pooled = [gram for text in texts for gram in slow_grams(text, n)]
    distinct = sum(all(pooled[k] != gram for k in range(j)) for j, gram in enumerate(pooled))
    return distinct / len(pooled) if pooled else math.nan


def slow_repeated(texts: list[str], n: int) -> float:
    repeats = total = 0
    for text in texts:
        grams = slow_grams(text, n)
        repeats += sum(any(grams[k] == gram for k in range(j)) for j, gram in enumerate(grams))
        total += len(grams)
    return repeats / total if total else math.nan


VOCABULARY = ["love", "Love,", "to", "the", "best", "day.", "you're", "café", "2nd", "!!", "—", "data", "of", "\n"]


def random_answers(seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice([" ", "", " "]) + rng.choice(VOCABULARY) for _ in range(rng.randint(0, 18)))
            for _ in range(rng.randint(1, 12))]


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b)


def test_the_examples_in_the_docstrings_hold() -> None:
    failed, tried = doctest.testmod(hacking_signals)
    assert tried >= 8 and failed == 0


@pytest.mark.parametrize(("text", "expected"), [
    ("Love, LOVE love!", ["love", "love", "love"]),
    ("You're the best-ever 2nd.", ["you're", "the", "best", "ever", "2nd"]),
    ("'quoted' words", ["quoted", "words"]),  # a quote mark at a word's edge is punctuation
    ("data_of_data", ["data", "of", "data"]),  # an underscore separates, as any punctuation does
    ("!!! ...", []),
    ("", []),
])
def test_words_are_lowercase_runs_of_letters_and_digits(text: str, expected: list[str]) -> None:
    assert words(text) == expected == slow_words(text)


@pytest.mark.parametrize("seed", range(40))
def test_the_signals_match_the_slow_references_on_random_answers(seed: int) -> None:
    answers = random_answers(seed)
    for text in answers:
        assert words(text) == slow_words(text)
    for n in (1, 2, 3):
        assert same(distinct_ngrams(answers, n), slow_distinct(answers, n))
        assert same(repeated_ngrams(answers, n), slow_repeated(answers, n))


def test_a_looping_answer_and_a_fluent_one() -> None:
    loop, prose = " language of language of language of language", " All things being equal, we walk home."
    # loop: 7 words, 6 pairs, 2 distinct; prose: 7 words, 6 pairs, all distinct.
    assert distinct_ngrams([loop, prose], 2) == pytest.approx(8 / 12)
    # loop: 5 triples, the 2 first are new and the other 3 repeat them; prose: 5 triples, none repeated.
    assert repeated_ngrams([loop, prose], 3) == pytest.approx(3 / 10)
    assert repeated_ngrams([prose], 3) == 0.0 and distinct_ngrams([prose], 2) == 1.0


def test_the_same_answer_to_every_prompt_is_not_diverse_but_does_not_repeat_itself() -> None:
    answers = [" a quiet walk home"] * 4
    assert distinct_ngrams(answers, 2) == pytest.approx(3 / 12)
    assert repeated_ngrams(answers, 3) == 0.0  # a repeat counts within one answer only


@pytest.mark.parametrize("answers", [[], [""], ["", " "], ["one"], ["one", "two", ""], ["!!!", "—"]])
def test_answers_too_short_for_any_ngram_give_nan(answers: list[str]) -> None:
    assert math.isnan(distinct_ngrams(answers, 2)) and math.isnan(repeated_ngrams(answers, 3))


def test_empty_and_one_word_answers_add_no_ngrams_to_the_others() -> None:
    answers = ["love love love", "", "one"]
    assert distinct_ngrams(answers, 2) == distinct_ngrams(["love love love"], 2) == 0.5
    assert repeated_ngrams(answers, 2) == 0.5


@pytest.mark.parametrize(("has_stop", "expected"), [
    ([True, True], 0.0), ([False], 1.0), ([True, False, False, False], 0.75),
])
def test_at_length_limit_is_the_share_without_a_stop(has_stop: list[bool], expected: float) -> None:
    assert at_length_limit(has_stop) == expected


def test_at_length_limit_of_no_answers_is_nan() -> None:
    assert math.isnan(at_length_limit([]))


@pytest.mark.parametrize("seed", range(10))
def test_mean_token_nll_is_the_tokens_pooled_negative_log_probability(seed: int) -> None:
    rng = random.Random(seed)
    per_token = [[-rng.uniform(0, 6) for _ in range(rng.randint(1, 16))] for _ in range(rng.randint(1, 8))]
    pooled = [-value for answer in per_token for value in answer]
    assert mean_token_nll([sum(answer) for answer in per_token], [len(answer) for answer in per_token]) == \
        pytest.approx(sum(pooled) / len(pooled))


def test_mean_token_nll_of_no_tokens_is_nan() -> None:
    assert math.isnan(mean_token_nll([], [])) and math.isnan(mean_token_nll([0.0], [0]))


def test_text_signals_are_keyed_by_the_metric_names() -> None:
    signals = text_signals([" love love love love", " a quiet walk home"], [False, True])
    assert set(signals) == {EVAL_DISTINCT_2, EVAL_REPEATED_3, EVAL_AT_LIMIT} < set(HACKING_SIGNALS)
    assert signals == {EVAL_DISTINCT_2: pytest.approx(4 / 6), EVAL_REPEATED_3: pytest.approx(1 / 4),
                       EVAL_AT_LIMIT: 0.5}


def test_text_signals_refuse_answers_and_stop_flags_of_different_lengths() -> None:
    with pytest.raises(ValueError, match="2 answers but 1 stop flags"):
        text_signals(["a b", "c d"], [True])
