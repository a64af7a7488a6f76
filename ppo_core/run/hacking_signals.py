"""Signals of reward hacking that need no judge: what a policy that games its reward does to its held-out answers,
measured from the answers alone (and, for entropy, their log-probabilities).

A policy that games a learned reward tends to say one thing over and over: it strings the words the reward likes,
repeats a phrase to the length limit, and gives every prompt the same answer. Each function here measures one of
those on decoded answer texts; :func:`text_signals` gathers them under the metric names of
:mod:`ppo_core.metric_names`. Pure Python, no torch: the trainer hands them the evaluation's texts and stop flags.

Example::

    text_signals([" love love love love", " a quiet walk home"], has_stop=[False, True])
    # {"eval/distinct_2grams": 0.667, "eval/repeated_3grams": 0.25, "eval/at_length_limit": 0.5}
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from ppo_core.metric_names import EVAL_AT_LIMIT, EVAL_DISTINCT_2, EVAL_REPEATED_3

DISTINCT_N = 2
"""The n of ``eval/distinct_2grams``: word pairs, where a policy that strings one phrase shows first."""
REPEATED_N = 3
"""The n of ``eval/repeated_3grams``: word triples, long enough that ordinary prose seldom repeats one in an answer
("of the" recurs in good English; "love to love" does not)."""

# A word is a run of letters or digits, with apostrophes inside it kept ("you're" is one word). Punctuation is
# dropped: the hacks these signals look for are repeated words, and "love," and "love" must count as one word for a
# repeat to be seen; a policy that games by punctuation alone ("!!!!") has no words, which the n-gram signals report
# as nothing to measure (nan) rather than as diverse.
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")


def words(text: str) -> list[str]:
    """The lowercase word tokens of ``text``: runs of letters and digits, apostrophes inside a word kept, everything
    else a separator.

    >>> words("Love, LOVE love!  You're the best-ever 2nd.")
    ['love', 'love', 'love', "you're", 'the', 'best', 'ever', '2nd']
    """
    return _WORD.findall(text.lower())


def ngrams(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    """The n-grams of one token sequence, in order: len(tokens) - n + 1 of them, none when it is shorter than n.

    >>> ngrams(["a", "b", "c"], 2)
    [('a', 'b'), ('b', 'c')]
    """
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def distinct_ngrams(texts: Sequence[str], n: int) -> float:
    """Distinct-n (Li et al. 2016), pooled over the answers: |U| / sum_i |G_i|, G_i the n-grams of answer i (none
    crosses from one answer into the next) and U the set of all of them. 1 when no n-gram occurs twice anywhere; a
    policy that gives every prompt the same words, or loops on one phrase, drives it toward 0. nan when the answers
    hold no n-gram at all (every one shorter than n words): nothing to measure.

    >>> distinct_ngrams(["love to love to", "a quiet walk"], 2)
    0.8
    >>> distinct_ngrams(["one", ""], 2)
    nan
    """
    grams = [gram for text in texts for gram in ngrams(words(text), n)]
    return len(set(grams)) / len(grams) if grams else math.nan


def repeated_ngrams(texts: Sequence[str], n: int) -> float:
    """The share of n-grams that repeat one earlier in the same answer, pooled over the answers:
    sum_i r_i / sum_i |G_i|, r_i the number of positions j of answer i whose n-gram also occurs at some k < j. 0 for
    answers that never repeat themselves, toward 1 for an answer that loops on one phrase; an n-gram shared by two
    answers is not a repeat (that is :func:`distinct_ngrams`' part). nan when the answers hold no n-gram at all.

    >>> repeated_ngrams(["love to love to love", "a quiet walk home"], 3)
    0.2
    """
    repeats = total = 0
    for text in texts:
        seen: set[tuple[str, ...]] = set()
        for gram in ngrams(words(text), n):
            repeats += gram in seen
            seen.add(gram)
            total += 1
    return repeats / total if total else math.nan


def at_length_limit(has_stop: Sequence[bool]) -> float:
    """The share of answers that ran to ``response_length`` without a stop token: (1/N) sum_i [not stop_i]. nan
    for no answers.

    >>> at_length_limit([True, False, False, False])
    0.75
    """
    return sum(not stop for stop in has_stop) / len(has_stop) if len(has_stop) else math.nan


def mean_token_nll(logprob_sums: Sequence[float], lengths: Sequence[int]) -> float:
    """The mean per-token negative log-probability of sampled answers, pooled over their tokens:
    -sum_i s_i / sum_i L_i, s_i = sum_t log pi(y_it | x_i, y_i<t) the answer's summed log-probability under the
    policy that sampled it and L_i its token count. Its expectation is the policy's per-token entropy on these
    prompts, so it is ``eval/entropy``'s sample estimate; nan when there are no tokens.

    >>> mean_token_nll([-6.0, -2.0], [3, 1])
    2.0
    """
    tokens = sum(lengths)
    return -sum(logprob_sums) / tokens if tokens else math.nan


def text_signals(texts: Sequence[str], has_stop: Sequence[bool]) -> dict[str, float]:
    """The held-out answers' text signals, by metric name: distinct word pairs, repeated word triples and the share
    at the length limit (``eval/entropy`` needs log-probabilities, which the trainer has).

    >>> signals = text_signals(["love love love love", "a quiet walk home"], [False, True])
    >>> {name: round(value, 3) for name, value in signals.items()}
    {'eval/distinct_2grams': 0.667, 'eval/repeated_3grams': 0.25, 'eval/at_length_limit': 0.5}
    """
    if len(texts) != len(has_stop):
        raise ValueError(f"{len(texts)} answers but {len(has_stop)} stop flags")
    return {EVAL_DISTINCT_2: distinct_ngrams(texts, DISTINCT_N), EVAL_REPEATED_3: repeated_ngrams(texts, REPEATED_N),
            EVAL_AT_LIMIT: at_length_limit(has_stop)}
