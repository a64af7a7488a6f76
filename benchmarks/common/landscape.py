"""The landscape of a set of runs, read at their evaluations: how much of KL and of gold the step mass explains, and
where gold peaks in KL. The figures the graph task's curve table gave (../shared/notes/tuning-landscape.md: R² 0.96
for log KL on log step mass, 0.63 for gold, gold best at 1-2 nats), computed the same way for another task.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

KL_FLOOR = 0.01
"""Nats: a held-out KL estimate at or below zero (sampling noise, for a policy that has barely moved) is read as this
before its logarithm is taken."""


@dataclass(frozen=True)
class EvalPoint:
    """One held-out evaluation of one run."""

    log10_mass: float
    """log10 of the learning rate summed over the optimiser steps taken so far (``tuner.search.kl_model``'s step
    mass)."""
    kl: float
    gold: float


def polynomial_r2(x: Sequence[float], y: Sequence[float], degree: int) -> float:
    """R² = 1 - Σ(y - ŷ)² / Σ(y - ȳ)² of the least-squares polynomial ŷ of ``degree`` in x; NaN with fewer points
    than coefficients + 1 or a constant y."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(xs) < degree + 2 or float(np.var(ys)) == 0.0:
        return math.nan
    fitted = np.polyval(np.polyfit(xs, ys, degree), xs)
    return float(1.0 - np.sum((ys - fitted) ** 2) / np.sum((ys - ys.mean()) ** 2))


def gold_by_kl(points: Sequence[EvalPoint], edges: Sequence[float]) -> list[dict[str, float | int]]:
    """Mean gold of the points whose KL lies in each [edges[i], edges[i+1]), with their count; empty bins left out."""
    rows: list[dict[str, float | int]] = []
    for low, high in itertools.pairwise(edges):
        inside = [p.gold for p in points if low <= p.kl < high]
        if inside:
            rows.append({"kl_low": low, "kl_high": high, "n": len(inside), "mean_gold": float(np.mean(inside))})
    return rows


def landscape(points: Sequence[EvalPoint], edges: Sequence[float]) -> dict[str, object]:
    """The step mass's R² for log10 KL (a line) and for gold (a quadratic, as for the graph task), the point of
    highest gold, and gold by KL bin."""
    masses = [p.log10_mass for p in points]
    best = max(points, key=lambda p: p.gold) if points else None
    return {
        "points": len(points),
        "r2_log_kl_on_mass": polynomial_r2(masses, [math.log10(max(p.kl, KL_FLOOR)) for p in points], 1),
        "r2_gold_on_mass_quadratic": polynomial_r2(masses, [p.gold for p in points], 2),
        "best_gold": None if best is None else {"gold": best.gold, "kl": best.kl, "log10_mass": best.log10_mass},
        "gold_by_kl": gold_by_kl(points, edges),
    }
