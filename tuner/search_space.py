"""The search space: its parameters, and how one point of it becomes PPOConfig values.

Two kinds of knob need more than one config field:

- ``kl_control``: a fixed beta (``kl_coef`` is chosen) or an adaptive controller (``kl_target`` is
  chosen); whichever is not in force is not chosen, so it cannot mislead the sampler.
- ``rollout_batch_size`` / ``mini_batch_size``: powers of two, turned into TRL's
  ``per_device_train_batch_size``, ``gradient_accumulation_steps`` and ``num_mini_batches`` so that
  every combination divides and no trial is wasted on an invalid batch hierarchy.

:func:`choose_point` walks the space and :func:`config_values` expands a point onto PPOConfig fields;
a trial and the study file's check both go through these two, so they cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import optuna

from ppo_core.config import settable_fields

# Search-space keys that are not PPOConfig fields: each sets one or more fields (see config_values).
VIRTUAL_PARAMS = ("kl_control", "rollout_batch_size", "mini_batch_size")
KL_CONTROL_MODES = ("fixed", "adaptive")


@dataclass(frozen=True)
class ParamSpec:
    """One searched parameter, as Optuna's suggest methods take it."""

    name: str
    type: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: tuple[Any, ...] = ()


def suggest_value(trial: optuna.Trial, spec: ParamSpec) -> Any:
    """One suggest call for ``spec``."""
    if spec.type == "categorical":
        return trial.suggest_categorical(spec.name, list(spec.choices))
    assert spec.low is not None and spec.high is not None  # the study file's parser requires both
    if spec.type == "int":
        return trial.suggest_int(spec.name, int(spec.low), int(spec.high), step=int(spec.step or 1), log=spec.log)
    return trial.suggest_float(spec.name, spec.low, spec.high, step=spec.step, log=spec.log)


def first_value(spec: ParamSpec) -> Any:
    """The first choice, or the low end of a range: a point the study-file check can build without a trial."""
    if spec.type == "categorical":
        return spec.choices[0]
    assert spec.low is not None  # the study file's parser requires low for numeric parameters
    return int(spec.low) if spec.type == "int" else spec.low


def choose_point(space: Mapping[str, ParamSpec], choose: Callable[[ParamSpec], Any]) -> dict[str, Any]:
    """A value for every parameter in force, virtual ones included; ``choose`` picks each (e.g. a suggest call).

    ``kl_control`` is chosen first because it decides whether ``kl_coef`` or ``kl_target`` is in force.
    """
    point: dict[str, Any] = {}
    mode = None
    if "kl_control" in space:
        mode = point["kl_control"] = choose(space["kl_control"])
    elif "kl_target" in space:
        mode = "adaptive"
    for name, spec in space.items():
        if name == "kl_control" or (mode == "fixed" and name == "kl_target") \
                or (mode == "adaptive" and name == "kl_coef"):
            continue
        point[name] = choose(spec)
    return point


def largest_power_of_two_at_most(value: int) -> int:
    """2^floor(log2(value)), and 1 for values below 1."""
    return 1 << (max(value, 1).bit_length() - 1)


def batch_hierarchy(rollout_batch_size: int, mini_batch_size: int, micro_batch_cap: int) -> dict[str, int]:
    """TRL's batch fields for a rollout of R episodes split into mini-batches of M (both powers of two).

    M is capped at R; the micro-batch is the largest power of two <= min(M, cap), so it divides M.
    """
    mini = min(mini_batch_size, rollout_batch_size)
    micro = largest_power_of_two_at_most(min(mini, micro_batch_cap))
    return {
        "per_device_train_batch_size": micro,
        "gradient_accumulation_steps": rollout_batch_size // micro,
        "num_mini_batches": rollout_batch_size // mini,
    }


def config_values(point: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, Any]:
    """The PPOConfig fields a point of the search space sets (``base`` not included, but read for the batch).

    Without a searched ``rollout_batch_size`` the rollout is the base's; the base's micro-batch caps the new one,
    so a study that fits memory at its base size keeps fitting.
    """
    values = {name: value for name, value in point.items() if name not in VIRTUAL_PARAMS}
    if point.get("kl_control") == "fixed":
        values["kl_target"] = None
    if "rollout_batch_size" in point or "mini_batch_size" in point:
        fields = settable_fields()
        micro_cap = int(base.get("per_device_train_batch_size", fields["per_device_train_batch_size"].default))
        accumulation = int(base.get("gradient_accumulation_steps", fields["gradient_accumulation_steps"].default))
        rollout = int(point.get("rollout_batch_size", micro_cap * accumulation))
        mini = int(point.get("mini_batch_size", rollout))
        values.update(batch_hierarchy(rollout, mini, micro_cap))
    return values


def suggest_params(trial: optuna.Trial, space: Mapping[str, ParamSpec], base: Mapping[str, Any]) -> dict[str, Any]:
    """The PPOConfig values this trial tries (the base values not included)."""
    return config_values(choose_point(space, lambda spec: suggest_value(trial, spec)), base)
