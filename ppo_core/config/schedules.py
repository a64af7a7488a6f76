"""Piecewise schedules of a value over PPO updates, as ``learning_rate_schedule`` and ``kl_coef_schedule`` give them:
a list of ``[update, value]`` pairs, the updates whole numbers from 1, strictly ascending. From update u on, the value
in force is that of the last pair whose update is <= u; before the first pair, the field's own (``learning_rate``, the
KL coefficient in force). Pairs past the run's last update are never reached, and allowed: a config does not know how
many updates it makes.

Example::

    value_at([[13, 2e-5], [19, 1.6e-5]], 3e-5, 12)  # 3e-5: before the first pair
    value_at([[13, 2e-5], [19, 1.6e-5]], 3e-5, 19)  # 1.6e-5
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ppo_core.config.checks import ConfigError

Schedule = Sequence[Sequence[float]]
"""``[[update, value], ...]``, as a config holds it."""


def value_at(schedule: Schedule | None, default: float, update: int) -> float:
    """The value in force during ``update``:

        v(u) = v_j, j = max{ j : u_j <= u },   or ``default`` where no u_j <= u

    for the pairs (u_j, v_j) of ``schedule`` (None or [] keeps ``default`` throughout)."""
    value = default
    for start, scheduled in schedule or ():
        if start > update:
            break  # ascending: no later pair starts sooner
        value = scheduled
    return value


def first_difference(one: Schedule | None, other: Schedule | None, default: float, last: int) -> int | None:
    """The first update u <= ``last`` where ``value_at(one, default, u) != value_at(other, default, u)``; None where
    the two agree at every update up to ``last``. The values in force change only where a pair starts, so only
    those updates are compared."""
    starts = sorted({int(pair[0]) for schedule in (one, other) for pair in schedule or () if pair[0] <= last})
    for update in starts:
        if value_at(one, default, update) != value_at(other, default, update):
            return update
    return None


def check_schedule(name: str, schedule: Schedule | None, *, zero_allowed: bool) -> None:
    """ConfigError, one line naming ``name``, unless ``schedule`` is null or pairs ``[update, value]`` whose updates
    are whole numbers >= 1, strictly ascending, and whose values are finite and > 0 (>= 0 with ``zero_allowed``)."""
    if schedule is None:
        return
    previous = 0.0
    for pair in schedule:
        if len(pair) != 2:
            raise ConfigError(f"{name}: each entry must be a pair [update, value], got {list(pair)!r}")
        update, value = pair
        if not (math.isfinite(update) and float(update).is_integer() and update >= 1):
            raise ConfigError(f"{name}: each update must be a whole number >= 1, got {update!r}")
        if update <= previous:
            raise ConfigError(f"{name}: the updates must be strictly ascending, got {update:g} after {previous:g}")
        if not (math.isfinite(value) and (value >= 0 if zero_allowed else value > 0)):
            rule = ">= 0" if zero_allowed else "> 0"
            raise ConfigError(f"{name}: each value must be a finite number {rule}, got {value!r} at update {update:g}")
        previous = update


def shown_schedule(schedule: Schedule) -> str:
    """``[[13, 2e-05], [19, 1.6e-05]]``: the pairs, updates as whole numbers and values exactly."""
    return "[" + ", ".join(f"[{int(update)}, {value!r}]" for update, value in schedule) + "]"


__all__ = ["Schedule", "check_schedule", "first_difference", "shown_schedule", "value_at"]
