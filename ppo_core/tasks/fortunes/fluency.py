"""Fluency in [0, 1]: how much a response reads like the corpus's English, as a product of named factors.

Sentiment alone is easy to game ("good good good good" has VADER compound +0.95), so the gold score multiplies it
by fluency, which falls for the ways a text degenerates. Each way has one measure, computed from the response's
words (``tokens``) and the corpus's counts, where a higher value is worse:

- ``repeated_pairs``: the share of repeated adjacent word pairs ("good good good", "the the the");
- ``repeated_content``: the share of words that repeat an earlier content word ("love great happy happy happy");
- ``unknown_words``: the share of words the corpus never uses (invented words, ``<unk>``);
- ``content_words``: the share of content words, damped for short texts (lists of adjectives, no words joining them);
- ``pair_surprise``: how much less likely the word order is than the same words in any order (word salad).

A factor is 1 up to its ``free`` value, falls linearly and is 0 from its ``zero`` value on (a :class:`Ramp`); the
thresholds come from the real corpus (``calibration.py``). A response shorter than ``full_length`` words loses in
proportion; an empty one scores 0.

>>> ramp = Ramp(free=0.25, zero=0.5)
>>> ramp(0.1), ramp(0.375), ramp(0.9)
(1.0, 0.5, 0.0)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ppo_core.tasks.fortunes.words import Counts, word_pairs

# Pseudo-words added to a short text's length where a share would otherwise judge it on one or two words: a real
# three-word answer ("makes perfect sense") is mostly content words and has only two word pairs.
SHRINK = 2


def repeated_pair_share(tokens: list[str]) -> float:
    """``1 - |distinct pairs| / |pairs|`` over adjacent word pairs; 0.0 for fewer than two pairs."""
    pairs = word_pairs(tokens)
    return 1.0 - len(set(pairs)) / len(pairs) if len(pairs) > 1 else 0.0


def repeated_content_share(tokens: list[str], common: frozenset[str]) -> float:
    """``(|content words| - |distinct content words|) / |words|``, content words being those not in ``common``;
    0.0 for no words. Common words ("the", "of") repeat in any real text, so only the others count."""
    content = [word for word in tokens if word not in common]
    return (len(content) - len(set(content))) / len(tokens) if tokens else 0.0


def unknown_word_share(tokens: list[str], counts: Counts) -> float:
    """``|words with corpus count 0| / |words|``; 0.0 for no words (the length factor judges those)."""
    return sum(counts.word_count(word) == 0 for word in tokens) / len(tokens) if tokens else 0.0


def content_word_share(tokens: list[str], common: frozenset[str]) -> float:
    """``|words not in common| / (|words| + SHRINK)``: high for a bare list of adjectives, never 1."""
    return sum(word not in common for word in tokens) / (len(tokens) + SHRINK)


def pair_surprise(tokens: list[str], counts: Counts) -> float:
    """Mean surprise of each word given the one before, against the word alone, damped for short texts:

    ``-sum_{(a, b)} log[ P(b | a) / p(b) ] / (|pairs| + SHRINK)``, with ``p(b) = (c(b) + 1) / (N + V)`` and
    ``P(b | a) = (c(a, b) + p(b)) / (c(a) + 1)``,

    ``c`` the corpus counts, ``N`` its words and ``V`` its vocabulary. Smoothing by ``p(b)`` makes a pair never seen
    after a rare word neutral (``log 1 = 0``: the corpus cannot know) and one never seen after a common word costly
    ("the of": the corpus has seen "the" thousands of times, never before "of"). Shuffled and random words score
    higher than real text, which averages below zero.
    """
    pairs = word_pairs(tokens)
    denominator = counts.total_words + counts.vocabulary_size
    total = 0.0
    for first, second in pairs:
        unigram = (counts.word_count(second) + 1) / denominator
        conditional = (counts.pair_count(first, second) + unigram) / (counts.word_count(first) + 1)
        total += math.log(conditional / unigram)
    return -total / (len(pairs) + SHRINK)


Feature = Callable[[list[str], Counts, frozenset[str]], float]

# The fluency measures by name, each given the response's words, the corpus counts and the common words. The
# calibration and the scorer iterate this table; a new measure is one entry here and one pure function above.
FEATURES: dict[str, Feature] = {
    "repeated_pairs": lambda tokens, counts, common: repeated_pair_share(tokens),
    "repeated_content": lambda tokens, counts, common: repeated_content_share(tokens, common),
    "unknown_words": lambda tokens, counts, common: unknown_word_share(tokens, counts),
    "content_words": lambda tokens, counts, common: content_word_share(tokens, common),
    "pair_surprise": lambda tokens, counts, common: pair_surprise(tokens, counts),
}


def feature_values(tokens: list[str], counts: Counts, common: frozenset[str]) -> dict[str, float]:
    """Every measure of :data:`FEATURES` for one response's words."""
    return {name: feature(tokens, counts, common) for name, feature in FEATURES.items()}


def ramp_factor(value: float, free: float, zero: float) -> float:
    """1 for ``value <= free``, 0 for ``value >= zero``, ``(zero - value) / (zero - free)`` between; a step at
    ``free`` when ``zero <= free``."""
    if value <= free:
        return 1.0
    if value >= zero:
        return 0.0
    return (zero - value) / (zero - free)


@dataclass(frozen=True)
class Ramp:
    """A falling factor: no penalty up to ``free``, none left from ``zero`` on."""

    free: float
    zero: float

    def __call__(self, value: float) -> float:
        return ramp_factor(value, self.free, self.zero)


def length_factor(num_words: int, full_length: float) -> float:
    """``min(1, num_words / full_length)``: 0 for an empty response, 1 from ``full_length`` words on."""
    return min(1.0, num_words / full_length) if full_length > 0 else 1.0


@dataclass(frozen=True)
class FluencyThresholds:
    """Where each fluency factor starts and stops falling, calibrated on the real corpus."""

    full_length: float
    """Words from which a response is long enough: the shortest real continuations' length."""
    ramps: Mapping[str, Ramp]
    """One ramp per measure of :data:`FEATURES`."""


def fluency_factors(tokens: list[str], counts: Counts, common: frozenset[str],
                    thresholds: FluencyThresholds) -> dict[str, float]:
    """Each factor of fluency for one response's words, by name: ``length`` and one per measure."""
    values = feature_values(tokens, counts, common)
    factors = {"length": length_factor(len(tokens), thresholds.full_length)}
    factors.update({name: thresholds.ramps[name](value) for name, value in values.items()})
    return factors


def fluency(factors: Mapping[str, float]) -> float:
    """The product of the factors, in [0, 1]."""
    return math.prod(factors.values())
