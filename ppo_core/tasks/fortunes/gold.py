"""The text task's gold scorer: what a person wants from a continuation, positive and fluent, in [0, 1].

``gold = positivity * fluency``, with ``positivity = (compound + 1) / 2`` from VADER's compound sentiment score in
[-1, 1] (``vaderSentiment``, MIT; a rule-based lexicon, independent of every model here) and ``fluency`` the product
of ``fluency.py``'s factors. Mapping the compound into [0, 1] before multiplying makes a degenerate text the worst
answer of all: with ``compound * fluency``, word salad (fluency near 0) would beat every fluent negative sentence.

The scorer judges the response alone, never the prompt: a short prompt ("If a man") says too little about a topic
for a model-free judge to tell an on-topic continuation from an off-topic one.

>>> scorer = build_gold_scorer(corpus.texts)  # doctest: +SKIP
>>> scorer(["When in doubt,"], ["ask a friend, who will be glad to help."])  # doctest: +SKIP
[0.87...]
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ppo_core.errors import NonFiniteError
from ppo_core.tasks.fortunes.calibration import calibrate
from ppo_core.tasks.fortunes.extra import missing_text_extra
from ppo_core.tasks.fortunes.fluency import GOLD_VERSIONS, FluencyThresholds, Response, fluency, fluency_factors
from ppo_core.tasks.fortunes.words import CorpusCounts

Sentiment = Callable[[str], float]
"""A text's sentiment in [-1, 1]; VADER's compound score unless a scorer is given another (a module-level function,
so that the scorer still pickles)."""


@functools.cache
def _vader() -> Callable[[str], dict[str, float]]:
    # One analyzer per process: it reads its lexicon from disk (about 10 ms), and is never pickled with a scorer.
    try:
        from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer  # type: ignore[import-untyped]
    except ImportError:
        raise missing_text_extra() from None
    analyzer = SentimentIntensityAnalyzer()
    return analyzer.polarity_scores


def vader_compound(text: str) -> float:
    """VADER's compound sentiment of ``text``, in [-1, 1] (0.0 for a text without sentiment words)."""
    return float(_vader()(text)["compound"])


def positivity(compound: float) -> float:
    """``(compound + 1) / 2``: a sentiment in [-1, 1] as a score in [0, 1]."""
    return (compound + 1.0) / 2.0


def gold_score(positive: float, fluent: float, response: str = "") -> float:
    """``positive * fluent``; raises :class:`NonFiniteError` naming the response when either is NaN or infinite,
    so that a broken sentiment scorer stops a run instead of training on NaN."""
    if not (math.isfinite(positive) and math.isfinite(fluent)):
        raise NonFiniteError(
            f"gold score: positivity {positive} and fluency {fluent} for the response {response[:60]!r} "
            "must be finite"
        )
    return positive * fluent


@dataclass(frozen=True)
class GoldBreakdown:
    """One response's gold score and the parts it is the product of."""

    compound: float
    positivity: float
    factors: Mapping[str, float]
    fluency: float
    gold: float


class TextGoldScorer:
    """Callable ``(prompts, responses) -> gold scores`` for the text task, bound to the corpus it was built on.

    A class rather than a closure so that a task can be pickled into tuner worker processes.
    """

    def __init__(self, counts: CorpusCounts, common: frozenset[str], thresholds: FluencyThresholds,
                 sentiment: Sentiment | None = None, version: int = 1) -> None:
        self.counts = counts
        self.common = common
        self.thresholds = thresholds
        self.sentiment = sentiment
        self.version = version

    def breakdown(self, response: str) -> GoldBreakdown:
        """The gold score of one response, with its parts."""
        read = Response.of(response, GOLD_VERSIONS[self.version].normalised)
        compound = (self.sentiment or vader_compound)(read.text)
        factors = fluency_factors(read, self.counts, self.common, self.thresholds)
        fluent = fluency(factors)
        positive = positivity(compound)
        return GoldBreakdown(compound, positive, factors, fluent, gold_score(positive, fluent, response))

    def __call__(self, prompts: Sequence[str], responses: Sequence[str]) -> list[float]:
        """Score each response; the prompts are checked for count only (the score reads the response alone)."""
        if len(prompts) != len(responses):
            raise ValueError(f"got {len(prompts)} prompts but {len(responses)} responses")
        return [self.breakdown(response).gold for response in responses]


def common_words(counts: CorpusCounts, sentiment: Sentiment, count: int) -> frozenset[str]:
    """The ``count`` most frequent words of the corpus that carry no sentiment (``FluencyRules.common_words``):
    words that join content words, and repeat in any text.

    A word with sentiment is never glue: "love" and "good" are among the corpus's hundred most frequent words, and
    counted as common they would let a bare list of positive words ("love good great joy") pass for a sentence.
    """
    return frozenset(word for word in counts.most_common(count) if sentiment(word) == 0.0)


def build_gold_scorer(texts: Sequence[str], sentiment: Sentiment | None = None, version: int = 1) -> TextGoldScorer:
    """The gold scorer of ``version`` (:data:`GOLD_VERSIONS`) whose corpus counts and calibration both come from
    ``texts`` (the task's training texts)."""
    counts = CorpusCounts.from_texts(texts)
    common = common_words(counts, sentiment or vader_compound, GOLD_VERSIONS[version].common_words)
    return TextGoldScorer(counts, common, calibrate(texts, counts, common, version=version), sentiment, version)
