"""How far the adaptive KL controller (``ppo_core.algorithm.kl.AdaptiveKLController``) can move its coefficient over a
run: the bound that says whether a ``kl_target`` can steer at all. Free of torch, so that the tuner's study checks can
read it without loading a deep-learning stack."""

from __future__ import annotations

import math

ERROR_CLIP = 0.2
"""The adaptive controller's clip on its proportional error (Ziegler et al. 2019): it moves beta by at most this
share of n / horizon per batch of n episodes."""


def adaptive_reach(total_episodes: int, batch_size: int, horizon: int) -> float:
    """The most the adaptive controller can move its coefficient over a run of E episodes in batches of n, as a
    factor: with x = c·n/H (c = ``ERROR_CLIP``, H the horizon) and u = ⌈E / n⌉ updates, KL held beyond the clip
    every update multiplies beta by (1 + x)^u or divides it by 1 / (1 - x)^u, the larger, so

        R = (1 - x)^(-u)   (infinite when x >= 1: beta can be driven to zero)

    R ≈ exp(c·E/H) for small batches. A target whose run has R near 1 barely steers: whatever the KL, the
    coefficient in force stays within a factor R of where it started.
    """
    if total_episodes < 0 or batch_size <= 0 or horizon <= 0:
        raise ValueError("adaptive_reach needs total_episodes >= 0, batch_size > 0 and horizon > 0, got "
                         f"{total_episodes}, {batch_size}, {horizon}")
    step = ERROR_CLIP * batch_size / horizon
    if step >= 1:
        return math.inf
    return float((1.0 - step) ** -math.ceil(total_episodes / batch_size))
