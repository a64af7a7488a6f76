"""The fluency thresholds, read off the real corpus: where real continuations stop, degenerate text begins.

Every kept text's continuation (its words after the prompt) is measured against the rest of the corpus (leave one
out: its own words and pairs do not count for it, as a policy's new sentence would not be in the corpus). For each
measure, ``free`` is its ``quantile`` over those continuations (0.99: one real text in a hundred is penalised at
all) and ``zero = free + RAMP_WIDTH * (free - median)``, so that the ramp scales with how widely real texts spread
on the measure (at least the version's span floor). ``full_length`` is the version's quantile of the real
continuations' lengths.

>>> thresholds = calibrate(corpus.texts, CorpusCounts.from_texts(corpus.texts), common)  # doctest: +SKIP
>>> thresholds.ramps["repeated_pairs"]  # doctest: +SKIP
Ramp(free=0.25, zero=0.375)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ppo_core.tasks.fortunes.fluency import GOLD_VERSIONS, FluencyThresholds, Ramp, Response, feature_values
from ppo_core.tasks.fortunes.prompts import split_text
from ppo_core.tasks.fortunes.words import CorpusCounts, LeaveOneOut

CALIBRATION_QUANTILE = 0.99
"""The share of real continuations each fluency measure leaves unpenalised."""

RAMP_WIDTH = 0.5
"""How far past ``free`` a factor reaches 0, in units of ``free - median``. Measured with report.py (1,000 held-out
prompts, seed 0): at 1.0, lists of positive words keep a median gold of 0.52; at 0.5, 0.05, while held-out real text
keeps fluency >= 0.9 in 96.7% of cases against 96.9%. Narrower, each factor becomes a step, and gold jumps where a
text changes by one word."""


def quantile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-quantile: the smallest value with at least ``q`` of the values at or below it."""
    if not values:
        raise ValueError("the quantile of no values")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def ramp_from(values: Sequence[float], q: float, width: float = RAMP_WIDTH, span_floor: float = 0.0) -> Ramp:
    """The ramp that spares the ``q`` share of ``values`` and reaches 0 ``max(width * (free - median), span_floor)``
    past it."""
    free, median = quantile(values, q), quantile(values, 0.5)
    return Ramp(free=free, zero=free + max(width * (free - median), span_floor))


def calibrate(texts: Sequence[str], counts: CorpusCounts, common: frozenset[str],
              q: float = CALIBRATION_QUANTILE, version: int = 1) -> FluencyThresholds:
    """Thresholds of gold ``version`` from the continuations of ``texts``, which ``counts`` must include (each is
    left out in turn)."""
    rules = GOLD_VERSIONS[version]
    values: dict[str, list[float]] = {name: [] for name in rules.measures}
    lengths: list[float] = []
    for text in texts:
        response = Response.of(split_text(text).reference, rules.normalised)
        for name, value in feature_values(response, LeaveOneOut(counts, text), common, rules.measures).items():
            values[name].append(value)
        lengths.append(len(response.tokens))
    return FluencyThresholds(
        full_length=quantile(lengths, rules.length_quantile),
        ramps={name: ramp_from(measured, rules.quantiles.get(name, q), span_floor=rules.span_floor.get(name, 0.0))
               for name, measured in values.items()},
        length_floor=rules.length_floor,
        length_power=rules.length_power,
    )
