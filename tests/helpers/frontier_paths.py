"""Synthetic training paths for frontier tests: trials whose KL grows along their path, scored by a gold curve that
peaks at a known KL."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np


def peaked_paths(finals: Iterable[float], peak_kl: float, evaluations: int = 8, top: float = 0.75,
                 curvature: float = 0.08, noise: float = 0.0, jitter: float = 0.0,
                 rng: np.random.Generator | None = None) -> tuple[list[int], list[float], list[float]]:
    """(trial numbers, KLs, golds) of one trial per final KL, each evaluated ``evaluations`` times along its path.

    At evaluation k of n, KL = final · (k/n)^1.5 · e^(jitter · z) and gold = top - curvature · (ln KL - ln peak)^2
    + noise · z', with z and z' standard normal draws from ``rng`` (none drawn where the scale is 0)."""
    rng = rng or np.random.default_rng(0)
    numbers: list[int] = []
    kls: list[float] = []
    golds: list[float] = []
    for trial, final in enumerate(finals):
        for step in range(1, evaluations + 1):
            kl = float(final) * (step / evaluations) ** 1.5
            if jitter:
                kl *= rng.lognormal(sigma=jitter)
            gold = top - curvature * (math.log(kl) - math.log(peak_kl)) ** 2
            numbers.append(trial)
            kls.append(kl)
            golds.append(gold + rng.normal(scale=noise) if noise else gold)
    return numbers, kls, golds
