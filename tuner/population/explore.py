"""Explore: the new value of a knob a member perturbs after copying a donor (population-based training's explore).

With probability ``resample`` the value is drawn afresh from the knob's search range, as the study's prior has it
(log-uniform on a log range); otherwise it is multiplied by one of the factors, chosen uniformly, and clipped to the
range (Ray's explore does not clip, and a learning rate past the searched range is one the study never asked for).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from tuner.search.space import ParamSpec


def drawn(param: ParamSpec, rng: random.Random) -> float:
    """A value from ``param``'s range: x = exp(U(ln low, ln high)) on a log range, U(low, high) otherwise."""
    assert param.low is not None and param.high is not None  # the population's knobs are float ranges
    if param.log:
        return math.exp(rng.uniform(math.log(param.low), math.log(param.high)))
    return rng.uniform(param.low, param.high)


def perturbed(value: float, param: ParamSpec, factors: Sequence[float], resample: float,
              rng: random.Random) -> float:
    """x' = drawn(range) with probability ``resample``, else x' = min(high, max(low, x * f)), f uniform among
    ``factors``."""
    assert param.low is not None and param.high is not None
    if rng.random() < resample:
        return drawn(param, rng)
    return min(param.high, max(param.low, value * rng.choice(list(factors))))


__all__ = ["drawn", "perturbed"]
