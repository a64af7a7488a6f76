"""How well the proxy reward model reads gold on responses it never saw: the share of pairs it orders as gold does,
and its rank correlation with gold.

Pairs are two responses to one prompt whose gold differs by at least the pairs' margin (``pairs.comparable_pairs``):
the comparisons the proxy was trained to make. The rank correlation runs over every response, ties included.

>>> pair_agreement([2.0, -1.0, 0.0], [(0, 1), (2, 1), (2, 0)])
0.666...
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ppo_core.tasks.fortunes.pairs import ScoredResponse, comparable_pairs
from ppo_core.tasks.ranks import rank_correlation


def pair_agreement(proxy: Sequence[float], pairs: Sequence[tuple[int, int]]) -> float:
    """``|{(b, w) : proxy[b] > proxy[w]}| / |pairs|`` over gold's ``(better, worse)`` index pairs (a proxy tie counts
    as wrong); NaN for no pairs."""
    return sum(proxy[b] > proxy[w] for b, w in pairs) / len(pairs) if pairs else float("nan")


def fidelity(scored: Sequence[ScoredResponse], proxy: Sequence[float]) -> dict[str, Any]:
    """The proxy's pair accuracy and Spearman correlation with gold over ``scored`` responses, and their counts."""
    gold = [item.gold for item in scored]
    pairs = comparable_pairs(scored)
    return {"pair_accuracy": pair_agreement(proxy, pairs), "spearman": rank_correlation(gold, proxy),
            "pairs": len(pairs), "responses": len(scored)}
