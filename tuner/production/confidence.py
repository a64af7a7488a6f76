"""The confidence interval of a mean over a few seeds: how far a configuration's validated result may be trusted."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

CONFIDENCE = 0.95


def mean_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(mean, low, high): Student's t interval  mean ± t_{(1+c)/2, n-1} · s / √n  over ``values``.

    s is the sample standard deviation (n - 1 in the denominator). With one value the interval is unknown: (x, nan,
    nan); with none everything is nan. The t quantile, not the normal's 1.96, because a validation has 3-10 seeds
    (t_{0.975, 4} = 2.78).
    """
    n = len(values)
    if n == 0:
        return math.nan, math.nan, math.nan
    mean = statistics.fmean(values)
    if n == 1:
        return mean, math.nan, math.nan
    # Imported here, and from scipy.special (what scipy.stats.t.ppf calls) rather than scipy.stats: the dashboard's
    # Study page imports this module for every study, and scipy.stats costs about 0.9 s to import, scipy.special 0.3.
    from scipy.special import stdtrit  # type: ignore[import-untyped]

    half_width = float(stdtrit(n - 1, (1 + confidence) / 2)) * statistics.stdev(values) / math.sqrt(n)
    return mean, mean - half_width, mean + half_width
