"""The search space: its parameters, and how one point of it becomes PPOConfig values.

Three kinds of knob decide which others are in force; each is chosen first, and a parameter not in force at a point
is not chosen there, so it cannot mislead the sampler (a TPE sampler is never fed a value that did nothing):

- ``advantage_estimator``: a parameter only some estimators read (``ppo_core.config.estimator_traits``: ``lam`` and the
  value network's knobs for gae, ``num_generations`` for the group estimators, ``scale_rewards`` for grpo) is chosen
  only at points whose estimator reads it. Not searched: the base's estimator (or PPOConfig's default, gae) decides.
- ``kl_in_reward``: the KL penalty in the reward (``kl_coef``) or in the loss (``beta``, with
  ``kl_loss_estimator``); only the coefficient in force is chosen. Not searched: the base's placement, or the
  estimator's default one (in the loss for grpo, in the reward for the others).
- ``kl_control`` (virtual): a fixed coefficient (the one in force is chosen) or an adaptive controller
  (``kl_target`` is chosen, and the base's coefficient in force is its starting value).

And ``rollout_batch_size`` / ``mini_batch_size`` (virtual): powers of two, turned into TRL's
``per_device_train_batch_size``, ``gradient_accumulation_steps`` and ``num_mini_batches`` so that every combination
divides and no trial is wasted on an invalid batch hierarchy.

:func:`choose_point` walks the space and :func:`config_values` expands a point onto PPOConfig fields; a trial, the
study file's check and the warm starts all go through these two, so they cannot drift apart.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import optuna

from ppo_core.config.estimator_traits import ESTIMATORS, default_generations, default_kl_in_reward, readers
from ppo_core.config.ppo_config import ConfigError, settable_fields

# Search-space keys that are not PPOConfig fields: each sets one or more fields (see config_values).
VIRTUAL_PARAMS = ("kl_control", "rollout_batch_size", "mini_batch_size")
KL_CONTROL_MODES = ("fixed", "adaptive")
# The knobs that decide which others are in force, in the order choose_point chooses them, before any other.
DECIDING_PARAMS = ("advantage_estimator", "kl_in_reward", "kl_control")
# The parameters read only where the KL penalty is in the reward (True) or only where it is in the loss (False).
KL_PLACEMENT_PARAMS: dict[str, bool] = {"kl_coef": True, "beta": False, "kl_loss_estimator": False}
# The KL coefficients: chosen under a fixed coefficient; an adaptive controller starts from the base's and steers it.
KL_COEFFICIENTS = ("kl_coef", "beta")


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


def suggest_value(trial: optuna.trial.BaseTrial, spec: ParamSpec) -> Any:
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


def default_estimator() -> str:
    """PPOConfig's advantage_estimator when none is set."""
    return str(settable_fields()["advantage_estimator"].default)


@dataclass(frozen=True)
class Regime:
    """What the deciding knobs say at one point, and so which other parameters are in force there."""

    estimator: str
    kl_in_reward: bool
    kl_control: str | None
    """fixed or adaptive; None when the space searches neither kl_control nor kl_target (the coefficient in force is
    chosen, and is the starting value if the base sets a kl_target)."""

    def idle_reason(self, name: str) -> str | None:
        """Why parameter ``name`` is not in force at points of this regime (``not used when kl_control is
        adaptive``); None when it is, and is chosen there."""
        only = readers(name)  # the estimators that read it, from ppo_core.config.estimator_traits; None: every one
        if only is not None and self.estimator not in only:
            return f"not used by advantage_estimator {self.estimator} (only by {', '.join(only)})"
        if name in KL_PLACEMENT_PARAMS and KL_PLACEMENT_PARAMS[name] != self.kl_in_reward:
            return f"not used with the KL penalty in the {'reward' if self.kl_in_reward else 'loss'} (kl_in_reward " \
                   f"{str(self.kl_in_reward).lower()})"
        if name in KL_COEFFICIENTS and self.kl_control == "adaptive":
            return "not used when kl_control is adaptive"
        if name == "kl_target" and self.kl_control == "fixed":
            return "not used when kl_control is fixed"
        return None

    def uses(self, name: str) -> bool:
        """Whether parameter ``name`` is in force (chosen) at points of this regime."""
        return self.idle_reason(name) is None


def regime_of(decided: Mapping[str, Any], space: Mapping[str, ParamSpec], base: Mapping[str, Any]) -> Regime:
    """The regime of a point whose searched deciding knobs ``decided`` holds; for those the space does not search,
    the base decides, then PPOConfig's defaults (the estimator's own KL placement; adaptive control wherever the
    space searches a kl_target without a kl_control)."""
    raw = decided.get("advantage_estimator", base.get("advantage_estimator"))
    estimator = default_estimator() if raw is None else str(raw)
    if estimator not in ESTIMATORS:
        # Only the base can hold it here (a searched value is one of its field's choices): named now, before any
        # config is built, which would name it too but later than this reading of the regimes.
        names = ", ".join(repr(name) for name in ESTIMATORS)
        raise ConfigError(f"base.advantage_estimator: expected one of {names}, got {raw!r}")
    in_reward = decided.get("kl_in_reward", base.get("kl_in_reward"))
    mode = decided.get("kl_control", "adaptive" if "kl_target" in space else None)
    return Regime(estimator, default_kl_in_reward(estimator) if in_reward is None else bool(in_reward), mode)


def regimes(space: Mapping[str, ParamSpec], base: Mapping[str, Any]) -> list[tuple[dict[str, Any], Regime]]:
    """Every combination of the searched deciding knobs' choices (one empty combination when none is searched), with
    its regime: every way the space can switch its parameters on and off."""
    searched = [name for name in DECIDING_PARAMS if name in space]
    choices = itertools.product(*(space[name].choices for name in searched))
    combinations = (dict(zip(searched, values, strict=True)) for values in choices)
    return [(decided, regime_of(decided, space, base)) for decided in combinations]


def choose_point(space: Mapping[str, ParamSpec], choose: Callable[[ParamSpec], Any],
                 base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A value for every parameter in force, virtual ones included; ``choose`` picks each (e.g. a suggest call).

    The deciding knobs (``advantage_estimator``, then ``kl_in_reward``, then ``kl_control``) are chosen first, in
    that order, because they decide which of the others are in force (:class:`Regime`); ``base`` decides for those
    the space does not search.
    """
    point = {name: choose(space[name]) for name in DECIDING_PARAMS if name in space}
    regime = regime_of(point, space, base or {})
    for name, spec in space.items():
        if name not in point and regime.uses(name):
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
        micro_cap, accumulation = base_batch(base)
        rollout = int(point.get("rollout_batch_size", micro_cap * accumulation))
        mini = int(point.get("mini_batch_size", rollout))
        values.update(batch_hierarchy(rollout, mini, micro_cap))
    return values


def base_batch(base: Mapping[str, Any]) -> tuple[int, int]:
    """The base's per_device_train_batch_size and gradient_accumulation_steps (PPOConfig's defaults where unset)."""
    fields = settable_fields()
    sizes = []
    for name in ("per_device_train_batch_size", "gradient_accumulation_steps"):
        value = base.get(name, fields[name].default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name}: expected a whole number >= 1, got {value!r}")
        sizes.append(value)
    return sizes[0], sizes[1]


def rollout_batches(space: Mapping[str, ParamSpec], base: Mapping[str, Any]) -> list[int]:
    """Every rollout batch a process can hold at a point of ``space`` (per_device_train_batch_size x
    gradient_accumulation_steps, as :func:`config_values` sets them): each ``rollout_batch_size`` choice, or the
    base's."""
    if "rollout_batch_size" in space:
        return [int(choice) for choice in space["rollout_batch_size"].choices]
    micro_cap, accumulation = base_batch(base)
    return [micro_cap * accumulation]


def _never_chosen_reason(name: str, space: Mapping[str, ParamSpec], base: Mapping[str, Any],
                         found: list[Regime]) -> str:
    """Why no point of ``space`` chooses ``name`` (no regime in ``found`` uses it), in words."""
    searched = [knob for knob in DECIDING_PARAMS if knob in space]
    estimators = " or ".join(dict.fromkeys(regime.estimator for regime in found))
    only = readers(name)
    if only is not None and not any(regime.estimator in only for regime in found):
        origin = "searched" if "advantage_estimator" in space else \
            "the base's" if base.get("advantage_estimator") is not None else "PPOConfig's default"
        return (f"only advantage_estimator {' or '.join(only)} reads it, and this study's is "
                f"{estimators} ({origin}); search advantage_estimator with one that reads it, or drop {name}")
    if name in KL_PLACEMENT_PARAMS and not any(regime.kl_in_reward == KL_PLACEMENT_PARAMS[name] for regime in found):
        wanted, other = ("reward", "loss") if KL_PLACEMENT_PARAMS[name] else ("loss", "reward")
        return (f"it acts only with the KL penalty in the {wanted}, and every point puts it in the {other} "
                f"(kl_in_reward, or the default placement of advantage_estimator {estimators}); search kl_in_reward "
                f"or drop {name}")
    if name in KL_COEFFICIENTS and all(regime.kl_control == "adaptive" for regime in found):
        return (f"kl_control is adaptive at every point, and the controller starts from the base's {name}; set it in "
                "base, or add fixed to kl_control's choices")
    if name == "kl_target":
        return "kl_control is fixed at every point; add adaptive to its choices, or drop kl_target"
    return f"no combination of {', '.join(searched) or 'the base'} puts it in force"


def unused_param(space: Mapping[str, ParamSpec], base: Mapping[str, Any]) -> str | None:
    """``search_space.<name>: never chosen: <why>`` for the first searched parameter that no point of ``space``
    chooses (lam with only critic-free estimators, kl_coef with the KL penalty always in the loss): it would look
    searched and do nothing. None when every one is chosen somewhere."""
    found = [regime for _, regime in regimes(space, base)]
    for name in space:
        if name not in DECIDING_PARAMS and not any(regime.uses(name) for regime in found):
            return f"search_space.{name}: never chosen: {_never_chosen_reason(name, space, base, found)}"
    return None


def _whole_values(param: ParamSpec) -> Iterator[int]:
    """Every value an int or categorical parameter can take (a categorical's choices; an int range's grid)."""
    if param.type == "categorical":
        yield from (int(choice) for choice in param.choices)
        return
    assert param.low is not None and param.high is not None  # numeric parameters have both
    yield from range(int(param.low), int(param.high) + 1, int(param.step or 1))


def group_problem(space: Mapping[str, ParamSpec], base: Mapping[str, Any]) -> str | None:
    """One line naming a num_generations and a rollout batch that can meet at a point of ``space`` and do not fit:
    the groups do not divide the rollout batch (each process must hold whole groups), or a group estimator gets fewer
    than 2 responses per prompt. Every pair is checked, where an example config meets only the first, so a pair that
    would fail each trial that draws it fails the study file instead. None when every pair fits."""
    try:
        rollouts = rollout_batches(space, base)
    except (TypeError, ValueError):
        return None  # a base batch size that is no number: the example config names it
    rollout_key = "rollout_batch_size" if "rollout_batch_size" in space else \
        "the base's rollout batch (per_device_train_batch_size x gradient_accumulation_steps)"
    for _, regime in regimes(space, base):
        if "num_generations" in space and regime.uses("num_generations"):
            counts: Iterable[Any] = _whole_values(space["num_generations"])
            key, origin = "search_space.num_generations", ""
        else:
            count = base.get("num_generations")
            counts = [default_generations(regime.estimator) if count is None else count]
            origin = " (the base's)" if count is not None else \
                f" (PPOConfig's default for advantage_estimator {regime.estimator})"
            key = "search_space.rollout_batch_size" if "rollout_batch_size" in space else "base.num_generations"
        for count in counts:
            if isinstance(count, bool) or not isinstance(count, int):
                continue  # the example config names a base value that is no whole number
            if ESTIMATORS[regime.estimator].groups and count < 2:
                return (f"{key}: num_generations {count}{origin} is too few for advantage_estimator "
                        f"{regime.estimator}, which compares the responses to one prompt (>= 2)")
            for rollout in rollouts:
                if rollout % count:
                    return (f"{key}: num_generations {count}{origin} does not divide {rollout_key} {rollout}; each "
                            "rollout batch must hold whole groups of responses to a prompt")
    return None


def suggest_params(trial: optuna.trial.BaseTrial, space: Mapping[str, ParamSpec],
                   base: Mapping[str, Any]) -> dict[str, Any]:
    """The PPOConfig values this trial tries (the base values not included)."""
    return config_values(choose_point(space, lambda spec: suggest_value(trial, spec), base), base)
