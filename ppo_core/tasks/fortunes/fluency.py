"""Fluency in [0, 1]: how much a response reads like the corpus's English, as a product of named factors.

Sentiment alone is easy to game ("good good good good" has VADER compound +0.95), so the gold score multiplies it
by fluency, which falls for the ways a text degenerates. Each way has one measure, computed from the response's
text and words (a :class:`Response`) and the corpus's counts, where a higher value is worse:

- ``repeated_pairs``: the share of repeated adjacent word pairs ("good good good", "the the the");
- ``repeated_content``: the share of words that repeat an earlier content word ("love great happy happy happy");
- ``unknown_words``: the share of words the corpus never uses (invented words, ``<unk>``, another language);
- ``content_words``: the share of content words, damped for short texts (lists of adjectives, no words joining them);
- ``pair_surprise``: how much less likely the word order is than the same words in any order (word salad);
- ``pair_shortfall``: how far adjacent pairs of frequent words fall short of the count their frequencies predict
  (function words in no grammatical order: "the I loved the very when I");
- ``odd_tokens``: the share of tokens that are not plain prose (symbols, emoji, other scripts, code, markup,
  addresses, hashtags, spelling games: ``surface.py``);
- ``shouting``: the share of words in capitals;
- ``bare_runs``: the share of words listed in runs without a common word between them ("love, joy, peace, hope");
- ``fragments``: the share of words that stand alone as a sentence ("Best. Day. Ever.");
- ``doubled_words``: the share of words that repeat the word just before ("so so so happy");
- ``folded_tokens``: the share of tokens written in styled or full-width letters, which fold into plain words;
- ``wrapped_tokens``: the share of tokens each quoted or bracketed on its own ("'amazing' and 'lovely'");
- ``numbers``: the share of tokens that are numbers alone ("1 2 3 happy 4 5 6");
- ``labels``: the share of tokens that label a speaker ("User:", "Assistant:");
- ``glueless``: whether two or more words stand with no common word to join them ("love joy peace");
- ``capitalised``: the share of words capitalised within a sentence ("Love And Joy And Peace").

A factor is 1 up to its ``free`` value, falls linearly and is 0 from its ``zero`` value on (a :class:`Ramp`); the
thresholds come from the real corpus (``calibration.py``). A response shorter than ``full_length`` words loses in
proportion; an empty one scores 0. Which measures a gold uses, and how it treats length, is its version's
:class:`FluencyRules` (:data:`GOLD_VERSIONS`): a task built with one version keeps its meaning when another is added.

>>> ramp = Ramp(free=0.25, zero=0.5)
>>> ramp(0.1), ramp(0.375), ramp(0.9)
(1.0, 0.5, 0.0)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ppo_core.tasks.fortunes.surface import (
    bare_run_share,
    capitalised_share,
    chained_share,
    doubled_word_share,
    folded_token_share,
    glueless,
    label_share,
    normalise,
    number_token_share,
    odd_token_share,
    one_word_sentence_share,
    sentences,
    shouted_share,
    wrapped_token_share,
)
from ppo_core.tasks.fortunes.words import Counts, word_pairs, words

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


SHORTFALL_SMOOTHING = 1.0
"""Pseudo-count ``alpha`` of :func:`pair_shortfall`: a pair costs only once its expected count is well above it, so
the corpus has had the chance to show it. Measured with version 3's ramp on 1,163 held-out continuations (seed 0,
``benchmarks/gold_battery.py``): 0.5, 1, 2 and 4 keep 73.2%, 73.0%, 73.2% and 72.9% of them at fluency >= 0.9, and
leave 33%, 34%, 35% and 37% of their shuffled copies above 0.1 gold."""


def pair_shortfall(tokens: list[str], counts: Counts, alpha: float = SHORTFALL_SMOOTHING) -> float:
    """Mean shortfall of adjacent word pairs against the count their words' frequencies predict, damped for short
    texts:

    ``sum_{(a, b)} max(0, log[ (E(a, b) + alpha) / (c(a, b) + alpha) ]) / (|pairs| + SHRINK)``, with
    ``E(a, b) = c(a) c(b) / N``,

    ``c`` the corpus counts and ``N`` its words: ``E`` is how often the pair would occur if words followed each
    other at random. Only a pair of frequent words can fall short ("the I": ``E`` about 110, seen twice), so rare
    words, which the corpus cannot judge, cost nothing; and a fluent pair earns no credit, so that the common pairs
    of a word salad ("I loved", "when I") cannot pay for its broken ones, as they do in :func:`pair_surprise`'s
    mean. 0.0 for fewer than two words, or an empty corpus (which cannot judge).
    """
    pairs = word_pairs(tokens)
    if counts.total_words == 0:
        return 0.0
    total = 0.0
    for first, second in pairs:
        expected = counts.word_count(first) * counts.word_count(second) / counts.total_words
        total += max(0.0, math.log((expected + alpha) / (counts.pair_count(first, second) + alpha)))
    return total / (len(pairs) + SHRINK)


BARE_RUN = 4
"""Consecutive words without a common word between them from which they count as a list, not a sentence: real
sentences run three ("makes perfect sense", "good judgment comes"), lists of feelings run on."""


@dataclass(frozen=True)
class Response:
    """A response as the measures read it: its text, its lower-cased words, and the text as written."""

    text: str
    tokens: list[str]
    raw: str

    @classmethod
    def of(cls, text: str, normalised: bool = True) -> Response:
        """``text`` with its typography mapped to ASCII first (:func:`surface.normalise`) when ``normalised``."""
        read = normalise(text) if normalised else text
        return cls(read, words(read), text)


Feature = Callable[[Response, Counts, frozenset[str]], float]

# The fluency measures by name, each given the response, the corpus counts and the common words. The calibration
# and the scorer iterate a version's names of this table; a new measure is one entry here and one pure function.
FEATURES: dict[str, Feature] = {
    "repeated_pairs": lambda response, counts, common: repeated_pair_share(response.tokens),
    "repeated_content": lambda response, counts, common: repeated_content_share(response.tokens, common),
    "unknown_words": lambda response, counts, common: unknown_word_share(response.tokens, counts),
    "content_words": lambda response, counts, common: content_word_share(response.tokens, common),
    "pair_surprise": lambda response, counts, common: pair_surprise(response.tokens, counts),
    "pair_shortfall": lambda response, counts, common: pair_shortfall(response.tokens, counts),
    "odd_tokens": lambda response, counts, common: odd_token_share(response.text),
    "shouting": lambda response, counts, common: shouted_share(response.text),
    "bare_runs": lambda response, counts, common: bare_run_share([words(part) for part in sentences(response.text)],
                                                                 common, BARE_RUN, SHRINK),
    "fragments": lambda response, counts, common: one_word_sentence_share(response.text),
    "doubled_words": lambda response, counts, common: doubled_word_share(response.tokens),
    "folded_tokens": lambda response, counts, common: folded_token_share(response.raw),
    "wrapped_tokens": lambda response, counts, common: wrapped_token_share(response.text),
    "numbers": lambda response, counts, common: number_token_share(response.text),
    "labels": lambda response, counts, common: label_share(response.text),
    "glueless": lambda response, counts, common: glueless(response.tokens, common),
    "capitalised": lambda response, counts, common: capitalised_share(response.text),
    "chained": lambda response, counts, common: chained_share(response.text, common),
}


@dataclass(frozen=True)
class FluencyRules:
    """One version of fluency: its measures, how its ramps are calibrated, and how it treats length."""

    measures: tuple[str, ...]
    """Names of :data:`FEATURES` it multiplies."""
    normalised: bool
    """Whether typography is mapped to ASCII before measuring (see :class:`Response`)."""
    common_words: int
    """How many of the corpus's most frequent words without sentiment count as common: the glue between content
    words ("the", "of", "into", "where")."""
    length_quantile: float
    """``full_length`` is this quantile of the real continuations' lengths in words."""
    length_floor: int
    """Words that earn no length credit at all: 1 makes a one-word reply ("Great!") score 0."""
    length_power: float
    """The length factor's power: above 1 it falls faster than linearly below ``full_length``."""
    quantiles: Mapping[str, float]
    """The share of real continuations a measure's ramp spares, where it is not the calibration's default (0.99):
    lower for the measures real text registers on now and then, which gamed text registers on throughout."""
    span_floor: Mapping[str, float]
    """Least ``zero - free`` of a measure's ramp, for measures real text almost never registers on (its median and
    its 99th percentile both 0): without it the factor would be a step, and one stray token would zero a text."""


# Version 4 reads what the folded text hides, and what a reader sees as a list however it is dressed: 59
# gamed responses of 15 kinds absent from the battery, written before any was scored (committed at dd15843, now
# among ``gamed.VERSION_4_KINDS``), found 6 above 0.2 under version 3: styled and full-width
# letters (0.92: NFKC folds them into "love and joy forever"), quoted words joined by "and" (0.60), three
# content words alone (0.52), and a chat's speaker labels (0.48). A second battery, written after this version
# was drafted, found words in a title's capitals (0.97), hence ``capitalised``. Its new measures spare 98-99% of
# real continuations; ``glueless`` is a step, since a text either has a word to join its others or has none
# (1.05% of real continuations have none, most of them three words or fewer, which the length factor already
# discounts). Held-out real continuations with fluency >= 0.9: 71.1%, against version 3's 73.0%.
_FOURTH = FluencyRules(
    measures=("repeated_pairs", "repeated_content", "unknown_words", "content_words", "pair_surprise", "odd_tokens",
              "shouting", "bare_runs", "fragments", "doubled_words", "pair_shortfall", "folded_tokens",
              "wrapped_tokens", "numbers", "labels", "glueless", "capitalised"),
    normalised=True, common_words=250, length_quantile=0.05, length_floor=1, length_power=1.5,
    quantiles={"odd_tokens": 0.9, "shouting": 0.95, "bare_runs": 0.95, "fragments": 0.95, "repeated_content": 0.95,
               "repeated_pairs": 0.95, "pair_shortfall": 0.97, "glueless": 0.98},
    span_floor={"odd_tokens": 0.12, "shouting": 0.3, "fragments": 0.3, "doubled_words": 0.15, "folded_tokens": 0.12,
                "wrapped_tokens": 0.12, "numbers": 0.15, "labels": 0.12, "glueless": 1.0})


GOLD_VERSIONS: dict[int, FluencyRules] = {
    1: FluencyRules(measures=("repeated_pairs", "repeated_content", "unknown_words", "content_words", "pair_surprise"),
                    normalised=False, common_words=100, length_quantile=0.01, length_floor=0, length_power=1.0,
                    quantiles={}, span_floor={}),
    # Version 2 reads the text as well as its words: 17 gamed responses of the battery's kinds scored 0.5 to 0.96
    # under version 1 (text mixing scripts 0.96, hashtags 0.73, code 0.72), by their sentiment words alone. Its
    # repetition ramps spare 95% of real text, not 99%: at 99% the companion's salad stacking "best" five times in
    # twenty words ("the best of the best national best") kept 0.99, and SmolLM2's "The data of data." 0.6. With 250
    # common words, a list of content words must run without any of them ("divided into distinct subsections" is
    # prose, "love joy peace hope" is not).
    2: FluencyRules(measures=("repeated_pairs", "repeated_content", "unknown_words", "content_words", "pair_surprise",
                              "odd_tokens", "shouting", "bare_runs", "fragments", "doubled_words"),
                    normalised=True, common_words=250, length_quantile=0.05, length_floor=1, length_power=1.5,
                    quantiles={"odd_tokens": 0.9, "shouting": 0.95, "bare_runs": 0.95, "fragments": 0.95,
                               "repeated_content": 0.95, "repeated_pairs": 0.95},
                    span_floor={"odd_tokens": 0.12, "shouting": 0.3, "fragments": 0.3, "doubled_words": 0.15}),
    # Version 3 judges word order as well: version 2 scored function words in no grammatical order 0.72 to 0.93
    # ("the day that I was I so the I loved the very when I love the", which a policy wrote under over-
    # optimisation), since each of its pairs is common English. Its shortfall ramp spares 97% of real text: at 99%,
    # a shuffled sentence of the battery kept 0.37 and 45% of 1,163 shuffled held-out continuations kept gold above
    # 0.1 (34% at 97%, 30% at 95%), for 1.1 points of held-out real text with fluency >= 0.9 (74.1% against 73.0%;
    # 71.8% at 95%).
    3: FluencyRules(measures=("repeated_pairs", "repeated_content", "unknown_words", "content_words", "pair_surprise",
                              "odd_tokens", "shouting", "bare_runs", "fragments", "doubled_words", "pair_shortfall"),
                    normalised=True, common_words=250, length_quantile=0.05, length_floor=1, length_power=1.5,
                    quantiles={"odd_tokens": 0.9, "shouting": 0.95, "bare_runs": 0.95, "fragments": 0.95,
                               "repeated_content": 0.95, "repeated_pairs": 0.95, "pair_shortfall": 0.97},
                    span_floor={"odd_tokens": 0.12, "shouting": 0.3, "fragments": 0.3, "doubled_words": 0.15}),
    4: _FOURTH,
    # Version 5 reads a list strung on "and": a third battery, written before it was scored (51 responses of 17
    # kinds, benchmarks/results/gold_battery/unseen_battery_3.json, now among ``gamed.VERSION_5_KINDS``), found
    # version 4 letting 4 through, 3 of them chains of feelings ("happy and glad and joyful and merry and bright
    # and cheerful", 0.98): "and" is a common word, so the list had its glue. 0.3% of real continuations chain at
    # all ("healthy and wealthy and dead"), and 2 of 1,725 distinct SmolLM2 samples the studies stored, so the ramp
    # starts at 0 and its span floor sets how fast it falls: at 0.2, one link in 16 words ("a spread of love and
    # kindness and reminding everyone", a clause after a pair) costs a third, and a five-word list all. A first
    # draft that let a link hold two words, or a comma, charged SmolLM2's prose ("our mission and vision, and
    # improved ...", 0.90 to 0.36).
    5: dataclasses.replace(_FOURTH, measures=(*_FOURTH.measures, "chained"),
                           span_floor={**_FOURTH.span_floor, "chained": 0.2}),
}
"""The gold's fluency versions; a text task names its version (``TextTaskParams.gold_version``)."""


def feature_values(response: Response, counts: Counts, common: frozenset[str],
                   measures: Iterable[str]) -> dict[str, float]:
    """Each named measure of :data:`FEATURES` for one response."""
    return {name: FEATURES[name](response, counts, common) for name in measures}


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


def length_factor(num_words: int, full_length: float, floor: int = 0, power: float = 1.0) -> float:
    """``clip((num_words - floor) / (full_length - floor), 0, 1) ** power``: 0 up to ``floor`` words, 1 from
    ``full_length`` words on (1 throughout when ``full_length <= floor``)."""
    if full_length <= floor:
        return 1.0 if num_words > floor or full_length <= 0 else 0.0
    return min(1.0, max(0.0, (num_words - floor) / (full_length - floor))) ** power


@dataclass(frozen=True)
class FluencyThresholds:
    """Where each fluency factor starts and stops falling, calibrated on the real corpus."""

    full_length: float
    """Words from which a response is long enough: the shortest real continuations' length."""
    ramps: Mapping[str, Ramp]
    """One ramp per measure the version uses, by its name in :data:`FEATURES`."""
    length_floor: int = 0
    """See :attr:`FluencyRules.length_floor`."""
    length_power: float = 1.0
    """See :attr:`FluencyRules.length_power`."""


def fluency_factors(response: Response, counts: Counts, common: frozenset[str],
                    thresholds: FluencyThresholds) -> dict[str, float]:
    """Each factor of fluency for one response, by name: ``length`` and one per measure of ``thresholds``."""
    values = feature_values(response, counts, common, thresholds.ramps)
    factors = {"length": length_factor(len(response.tokens), thresholds.full_length, thresholds.length_floor,
                                       thresholds.length_power)}
    factors.update({name: thresholds.ramps[name](value) for name, value in values.items()})
    return factors


def fluency(factors: Mapping[str, float]) -> float:
    """The product of the factors, in [0, 1]."""
    return math.prod(factors.values())
