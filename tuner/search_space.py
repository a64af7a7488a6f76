"""Turn a study's search space into PPOConfig values for one Optuna trial.

Two kinds of knob need more than one suggest call:

- ``kl_control``: a fixed beta (``kl_coef`` is sampled) or an adaptive controller (``kl_target`` is
  sampled); whichever is not chosen is not sampled, so it cannot mislead the sampler.
- ``rollout_batch_size`` / ``mini_batch_size``: powers of two, turned into TRL's
  ``per_device_train_batch_size``, ``gradient_accumulation_steps`` and ``num_mini_batches`` so that
  every sampled combination divides and no trial is wasted on an invalid batch hierarchy.
"""

from __future__ import annotations

from typing import Any

import optuna

from ppo_core.config import PPOConfig
from tuner.study_config import VIRTUAL_PARAMS, ParamSpec


def suggest_value(trial: optuna.Trial, spec: ParamSpec) -> Any:
    """One suggest call, as Optuna's suggest methods take the spec."""
    if spec.type == "categorical":
        return trial.suggest_categorical(spec.name, list(spec.choices))
    if spec.type == "int":
        return trial.suggest_int(spec.name, int(spec.low), int(spec.high), step=int(spec.step or 1), log=spec.log)
    return trial.suggest_float(spec.name, spec.low, spec.high, step=spec.step, log=spec.log)


def largest_power_of_two_at_most(value: int) -> int:
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


def suggest_params(trial: optuna.Trial, space: dict[str, ParamSpec], base: dict[str, Any]) -> dict[str, Any]:
    """The PPOConfig values this trial tries (the base values not included)."""
    values: dict[str, Any] = {}
    kl_mode = None
    if "kl_control" in space:
        kl_mode = suggest_value(trial, space["kl_control"])
    elif "kl_target" in space:
        kl_mode = "adaptive"
    for name, spec in space.items():
        if name in VIRTUAL_PARAMS or (kl_mode == "fixed" and name == "kl_target") \
                or (kl_mode == "adaptive" and name == "kl_coef"):
            continue
        values[name] = suggest_value(trial, spec)
    if kl_mode == "fixed":
        values["kl_target"] = None

    defaults = PPOConfig.__dataclass_fields__
    if "rollout_batch_size" in space or "mini_batch_size" in space:
        micro_cap = int(base.get("per_device_train_batch_size", defaults["per_device_train_batch_size"].default))
        base_rollout = micro_cap * int(base.get("gradient_accumulation_steps", 1))
        rollout = suggest_value(trial, space["rollout_batch_size"]) if "rollout_batch_size" in space \
            else base_rollout
        mini = suggest_value(trial, space["mini_batch_size"]) if "mini_batch_size" in space else rollout
        values.update(batch_hierarchy(int(rollout), int(mini), micro_cap))
    return values
