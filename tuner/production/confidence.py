"""The confidence interval of a mean over a few seeds: how far a configuration's validated result may be trusted."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from tuner.study.student_t import t_quantile

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
    half_width = t_quantile((1 + confidence) / 2, n - 1) * statistics.stdev(values) / math.sqrt(n)
    return mean, mean - half_width, mean + half_width
