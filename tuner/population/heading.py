"""Whether a member is heading past the study's KL budget by the end of its run, from its own held-out KL so far: a
member that will end over the budget must not be copied, though it keeps the budget now.

The forecast is a least-squares line in updates through the member's last evaluations of the budget's metric and the
run's start, where the policy is its reference and KL is 0: with one evaluation so far the line runs from the origin
through it; with more, through the last :data:`POINTS` of them. Linear in updates: a constant learning rate moves
the policy about as far each update, and KL that grows faster than that is caught by the next ranking.
"""

from __future__ import annotations

from collections.abc import Sequence

POINTS = 3
"""Evaluations the trend is read from (the origin counts while there are fewer)."""


def forecast_at(points: Sequence[tuple[float, float]], horizon: float) -> float:
    """k(H) = k̄ + b (H - ū), b = Σ (u_i - ū)(k_i - k̄) / Σ (u_i - ū)², over the last :data:`POINTS` of (0, 0) and
    ``points`` (update u_i, KL k_i); with every u_i equal, k(H) = k̄."""
    chosen = [(0.0, 0.0), *points][-POINTS:]
    mean_u = sum(u for u, _ in chosen) / len(chosen)
    mean_k = sum(k for _, k in chosen) / len(chosen)
    spread = sum((u - mean_u) ** 2 for u, _ in chosen)
    if spread == 0:
        return mean_k
    slope = sum((u - mean_u) * (k - mean_k) for u, k in chosen) / spread
    return mean_k + slope * (horizon - mean_u)


def heading_past(points: Sequence[tuple[float, float]], horizon: float, limit: float) -> bool:
    """Whether the forecast at ``horizon`` (:func:`forecast_at`) passes ``limit``."""
    return forecast_at(points, horizon) > limit


__all__ = ["POINTS", "forecast_at", "heading_past"]
