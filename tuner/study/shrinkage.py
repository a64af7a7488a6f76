"""Configurations' means shrunk by the seed noise: how a race compares a configuration run on two seeds with one run on
three.

A configuration's mean over n seeds is its true value plus seed noise of variance sigma^2 / n. Ranking by the raw
mean favours a lucky configuration on few seeds; ranking "more seeds first" drops a clearly better configuration that
the budget ended before its last seed. The empirical-Bayes (James-Stein) estimate does neither: it pulls each mean
toward the mean of all configurations by as much as its own seeds leave it uncertain,

    shrunk_i = mu + tau^2 / (tau^2 + sigma^2 / n_i) * (mean_i - mu)

with sigma^2 the seed noise pooled over the configurations run on two seeds or more whose runs differ,
sigma^2 = sum_i (n_i - 1) s_i^2 / sum_i (n_i - 1), mu the mean of the configurations' means and tau^2 their spread
beyond the noise, tau^2 = max(var(mean_i) - mean(sigma^2 / n_i), TAU2_FLOOR * sigma^2) (the method of moments).
Without a configuration on two seeds there is no noise to shrink by, and :func:`shrunk_means` says so (None).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

TAU2_FLOOR = 1e-3
"""The smallest spread between configurations, as a share of the seed noise: where the means differ by no more than
noise, shrinking still keeps their order by how far each lies from the others and how many seeds back it, rather than
collapsing them all onto one value."""


def pooled_noise(groups: Sequence[Sequence[float]]) -> float | None:
    """sigma^2 = sum_i (n_i - 1) s_i^2 / sum_i (n_i - 1) over the groups of two values or more that differ; None
    without one. A group whose values are all equal is left out: a bounded score stuck at its bound (a run that
    learned nothing, or hacked gold to 0, on every seed) says nothing of the seeds' noise where runs differ, and
    counted it would shrink the noise and with it the pull on a lucky mean.

    >>> pooled_noise([[1.0, 3.0], [5.0], [0.0, 0.0]])
    2.0
    """
    varying = [group for group in groups if len(group) > 1 and len(set(group)) > 1]
    degrees = sum(len(group) - 1 for group in varying)
    if degrees == 0:
        return None
    return sum((len(group) - 1) * statistics.variance(group) for group in varying) / degrees


def shrunk_means(groups: Sequence[Sequence[float]]) -> list[float] | None:
    """Each group's mean shrunk toward the mean of the groups' means by its seed noise (the module's formula); None
    when no group has two values, or there is only one group.

    >>> [round(m, 3) for m in shrunk_means([[0.50, 0.48, 0.48], [0.57, 0.55], [0.40]])]
    [0.487, 0.559, 0.402]
    """
    sigma2 = pooled_noise(groups)
    if sigma2 is None or len(groups) < 2:
        return None
    means = [statistics.fmean(group) for group in groups]
    mu = statistics.fmean(means)
    noise = statistics.fmean(sigma2 / len(group) for group in groups)
    tau2 = max(statistics.variance(means) - noise, TAU2_FLOOR * sigma2)
    return [mu + tau2 / (tau2 + sigma2 / len(group)) * (mean - mu) for group, mean in zip(groups, means, strict=True)]
