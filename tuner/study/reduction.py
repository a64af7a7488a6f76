"""How a metric's per-update history becomes one number, for an objective and a constraint alike."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

REDUCTIONS = ("last", "mean", "max", "min", "mean_last_k")


class Reduction(Protocol):
    """An objective's or a constraint's metric, ``reduce`` and ``k``."""

    @property
    def metric(self) -> str: ...

    @property
    def reduce(self) -> str: ...

    @property
    def k(self) -> int: ...


def reduce_history(history: Sequence[float], reduction: Reduction) -> float:
    """One number from a metric's history (one value per update that reported it): its last, mean, max or min, or
    the mean of its last k values; NaN for an empty history."""
    if not history:
        return math.nan
    if reduction.reduce == "last":
        return history[-1]
    if reduction.reduce == "max":
        return max(history)
    if reduction.reduce == "min":
        return min(history)
    window = history if reduction.reduce == "mean" else history[-reduction.k:]
    return sum(window) / len(window)


def reduction_label(reduction: Reduction) -> str:
    """``metric (reduce)``, with k for mean_last_k: ``eval/gold_score (mean_last_k 2)``."""
    k = f" {reduction.k}" if reduction.reduce == "mean_last_k" else ""
    return f"{reduction.metric} ({reduction.reduce}{k})"
