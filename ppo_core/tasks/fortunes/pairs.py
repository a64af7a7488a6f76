"""Gold-labelled preference pairs for the text task's proxy reward model, from responses already scored.

Two responses to one prompt make a pair, the one with the higher gold score chosen. Pairs whose scores differ by
less than ``margin`` are dropped: gold's small differences (a word more or less of VADER's lexicon) are a preference
no person would state, and training on them teaches the proxy noise.

>>> scored = [ScoredResponse("If a man", "is happy, all is well.", 0.8),
...           ScoredResponse("If a man", "falls, he falls.", 0.4)]
>>> [pair.chosen for pair in preference_pairs(scored, margin=0.05)]
['is happy, all is well.']
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ppo_core.errors import NonFiniteError

DEFAULT_MARGIN = 0.05
"""Least gold difference that makes a preference."""


@dataclass(frozen=True)
class ScoredResponse:
    """One response to a prompt and its gold score."""

    prompt: str
    response: str
    gold: float


@dataclass(frozen=True)
class TextPreferencePair:
    """Two responses to one prompt, ``chosen`` having the gold score higher by at least the margin."""

    prompt: str
    chosen: str
    rejected: str
    chosen_gold: float
    rejected_gold: float


def _ordered(a: ScoredResponse, b: ScoredResponse) -> TextPreferencePair:
    better, worse = (a, b) if a.gold > b.gold else (b, a)
    return TextPreferencePair(better.prompt, better.response, worse.response, better.gold, worse.gold)


def preference_pairs(scored: Sequence[ScoredResponse], margin: float = DEFAULT_MARGIN) -> list[TextPreferencePair]:
    """Pair each prompt's responses in the order given (first with second, third with fourth, ...; an odd one out
    is left unpaired), so each response is in at most one pair, and drop the pairs with ``|gold difference| <
    margin`` and exact ties (which carry no preference, whatever the margin).

    Pairs come out in the order their second response comes in. Raises :class:`NonFiniteError` on a NaN or infinite
    gold score (it compares false with everything, so a side would be picked silently) and ``ValueError`` on a
    negative margin.
    """
    _check(scored, margin)
    waiting: dict[str, ScoredResponse] = {}
    pairs: list[TextPreferencePair] = []
    for item in scored:
        partner = waiting.pop(item.prompt, None)
        if partner is None:
            waiting[item.prompt] = item
        elif item.gold != partner.gold and abs(item.gold - partner.gold) >= margin:
            pairs.append(_ordered(partner, item))
    return pairs


def all_pairs(scored: Sequence[ScoredResponse], margin: float = DEFAULT_MARGIN) -> list[TextPreferencePair]:
    """Every two responses to one prompt whose gold differs by at least ``margin`` (exact ties never), the higher
    chosen: ``k`` responses give up to ``k (k - 1) / 2`` pairs, as a labeller ranking ``k`` responses does. Pairs
    come grouped by prompt, in the order of each prompt's first response; errors as :func:`preference_pairs`."""
    return [_ordered(scored[better], scored[worse]) for better, worse in comparable_pairs(scored, margin)]


def comparable_pairs(scored: Sequence[ScoredResponse], margin: float = DEFAULT_MARGIN) -> list[tuple[int, int]]:
    """``(better, worse)`` indices into ``scored`` of :func:`all_pairs`' pairs, in its order."""
    _check(scored, margin)
    groups: dict[str, list[int]] = {}
    for index, item in enumerate(scored):
        groups.setdefault(item.prompt, []).append(index)
    pairs = []
    for members in groups.values():
        for i, first in enumerate(members):
            for second in members[i + 1:]:
                a, b = scored[first].gold, scored[second].gold
                if a != b and abs(a - b) >= margin:
                    pairs.append((first, second) if a > b else (second, first))
    return pairs


def _check(scored: Sequence[ScoredResponse], margin: float) -> None:
    if margin < 0:
        raise ValueError(f"margin must be at least 0, got {margin}")
    for item in scored:
        if not math.isfinite(item.gold):
            raise NonFiniteError(f"gold score {item.gold} for the response {item.response[:60]!r} must be finite")
