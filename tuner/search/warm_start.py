"""Warm starts: the first trials of a new study, at points worth trying before the sampler has learnt anything.

A study file's ``enqueue`` list names them, in order:

- ``trl_defaults``: TRL 1.12 PPOConfig's defaults for every searched parameter. ppo_core's PPOConfig defaults are
  TRL's, so they are read from there (``value_learning_rate`` None means the policy's rate). TRL's PPOConfig is PPO
  with GAE: ``advantage_estimator`` gae, the KL penalty in the reward, a symmetric clip.
- ``seed_guidance``: the seed guidance's own starting point (:func:`guidance_values`), PPO with GAE as well.
- a mapping of searched parameters to values, e.g. ``{learning_rate: 1e-5, kl_coef: 0.1}``. A searched parameter it
  leaves out takes TRL's default, as ``ppo-tune train`` would run with those values alone (rather than the middle of
  its range, which would be a point nobody chose); the notes name each one filled in.

Each entry becomes a point of the search space: the params ``study.enqueue_trial`` takes, keyed by search-space
names, virtual ones included (``kl_control``, ``rollout_batch_size``, ``mini_batch_size``; see ``tuner.search.space``),
walked with :func:`~tuner.search.space.choose_point` so that only the knobs in force are given (the estimator's own,
the KL coefficient in force; the study's base decides where the space does not search the estimator or the KL
placement). The knobs TRL's PPOConfig lacks (``NOT_IN_TRL_PPO``: ``num_generations``, ``scale_rewards``, ``beta``,
``kl_loss_estimator``, GRPOConfig's) have no preset value: where one is in force, PPOConfig's default for the point's
estimator stands in, with a note. Values are fitted to the space (:func:`fit_value`): ranges clip, ints round, steps
snap and a numeric categorical takes its nearest choice, each with a note. A preset value that no choice can stand
for (``kl_control: fixed`` where only adaptive is searched) skips that entry, with the reason; the same in a mapping
the user wrote is an error in the study file, as is a value its own point would not use (``num_generations`` for
gae, ``kl_coef`` with the KL penalty in the loss).

Example::

    starts = warm_start_points(spec.search_space, ["trl_defaults", {"learning_rate": 1e-5}])
    for note in enqueue_warm_starts(study, starts):
        print(note)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna

from ppo_core.config.estimator_traits import default_generations, default_kl_in_reward
from ppo_core.config.ppo_config import settable_fields
from tuner.search.space import DECIDING_PARAMS, ParamSpec, choose_point, default_estimator, regime_of
from tuner.store.attrs import WARM_START_ATTR

# The seed guidance's typical ranges (shared/seeds/ppo-hyperparameters-for-llms.txt), by search-space name: its
# "Learning Rates" (policy 1e-6..5e-5, value 1e-5..1e-4), "KL Divergence Coefficient (β)" (0.01..0.2 for a fixed
# coefficient), "PPO Epochs" (2..10) and "Batch Sizes" (mini-batch 4..64, rollout 64..1024) sections.
GUIDANCE_RANGES: dict[str, tuple[float, float]] = {
    "learning_rate": (1e-6, 5e-5),
    "value_learning_rate": (1e-5, 1e-4),
    "kl_coef": (0.01, 0.2),
    "num_ppo_epochs": (2, 10),
    "mini_batch_size": (4, 64),
    "rollout_batch_size": (64, 1024),
}
# Whole numbers among them. Their middles round down: the guidance calls fewer epochs "more stable" and smaller
# mini-batches the memory-safe side; and sqrt(2 * 10) = 4.47 lies exactly between 4 and 5 in log space, so "nearest"
# would decide nothing there (the batch sizes' middles, 16 and 256, are whole already).
GUIDANCE_WHOLE = ("num_ppo_epochs", "mini_batch_size", "rollout_batch_size")
# The values it states outright: "A common starting point is ϵ=0.2" (PPO Clipping Parameter), "λ=0.95"
# (Generalized Advantage Estimation), "A typical value for c1 is 0.5 or 1.0" (Value Function Coefficient: the lower),
# and a fixed β, its first form (KL Divergence Coefficient; an adaptive target is the alternative it offers).
# Its subject is PPO with GAE and a value network, β penalising the reward: advantage_estimator gae, the KL penalty in
# the reward.
GUIDANCE_STATED: dict[str, Any] = {"cliprange": 0.2, "lam": 0.95, "vf_coef": 0.5, "kl_control": "fixed",
                                   "kl_target": None, "advantage_estimator": "gae", "kl_in_reward": True}
# PPOConfig's fields that TRL 1.12's PPOConfig has no counterpart of (TRL's GRPOConfig names them): neither preset
# holds a value for them. Where one is in force at a point, PPOConfig's default for the point's estimator stands in.
NOT_IN_TRL_PPO = ("num_generations", "scale_rewards", "beta", "kl_loss_estimator")


class WarmStartError(ValueError):
    """An ``enqueue`` entry is wrong; one line naming it (``enqueue[2].lam: ...``). The study file's parser raises
    it again as a StudySpecError."""


@dataclass(frozen=True)
class WarmStart:
    """One ``enqueue`` entry as a point of the search space, or the reason it cannot be one."""

    label: str
    """``trl_defaults``, ``seed_guidance``, or ``enqueue[i]`` for a mapping; stored on the trial it queues."""
    params: dict[str, Any] = field(default_factory=dict)
    """The point, keyed by search-space names (what ``study.enqueue_trial`` takes); empty when skipped."""
    notes: tuple[str, ...] = ()
    """Each value moved to fit the space, or filled in from TRL's defaults, as one line starting with the label."""
    skipped: str | None = None
    """Why the entry is no point of this space; None when it is one."""


def geometric_middle(low: float, high: float) -> float:
    """The middle of [low, high] on a log scale, sqrt(low · high): as many times low as high is times it."""
    return math.sqrt(low * high)


def guidance_values() -> dict[str, Any]:
    """The seed guidance's starting point in search-space names: the values it states (ε 0.2, λ 0.95, c1 0.5, a
    fixed β) and the geometric middle of each range it gives (policy lr 7.1e-6, value lr 3.2e-5, β 0.045, 4 epochs,
    mini-batches of 16, rollouts of 256), the whole-number ones rounded down."""
    values: dict[str, Any] = dict(GUIDANCE_STATED)
    for name, (low, high) in GUIDANCE_RANGES.items():
        middle = geometric_middle(low, high)
        # The tolerance keeps a middle computed as 255.99999999999997 from rounding down to 255.
        values[name] = math.floor(middle + 1e-9) if name in GUIDANCE_WHOLE else middle
    return values


def space_values(fields: Mapping[str, Any]) -> dict[str, Any]:
    """PPOConfig-style values in search-space names: the fields themselves, plus

    - ``value_learning_rate`` = ``learning_rate`` where it is None (PPOConfig's meaning of None);
    - ``cliprange_low`` and ``cliprange_high`` = ``cliprange`` where None (likewise);
    - ``kl_in_reward`` = the estimator's placement where None (in the loss for grpo, in the reward otherwise);
    - ``kl_control`` = adaptive iff ``kl_target`` is set;
    - ``rollout_batch_size`` R = per_device_train_batch_size × gradient_accumulation_steps and
      ``mini_batch_size`` = R / num_mini_batches (the inverse of ``tuner.search.space.batch_hierarchy``).
    """
    values = dict(fields)
    if values.get("value_learning_rate") is None:
        values["value_learning_rate"] = values.get("learning_rate")
    for bound in ("cliprange_low", "cliprange_high"):
        if values.get(bound) is None and values.get("cliprange") is not None:
            values[bound] = values["cliprange"]
    if values.get("kl_in_reward") is None:
        values["kl_in_reward"] = default_kl_in_reward(str(values.get("advantage_estimator") or default_estimator()))
    values["kl_control"] = "adaptive" if values.get("kl_target") is not None else "fixed"
    rollout = int(values["per_device_train_batch_size"]) * int(values["gradient_accumulation_steps"])
    values["rollout_batch_size"] = rollout
    values["mini_batch_size"] = rollout // int(values["num_mini_batches"])
    return values


def trl_default_values() -> dict[str, Any]:
    """TRL 1.12 PPOConfig's defaults in search-space names (rollouts of 8 in one mini-batch of 8, a fixed β 0.05 in
    the reward, GAE); the fields TRL's PPOConfig lacks (``NOT_IN_TRL_PPO``) left out."""
    fields = {name: f.default for name, f in settable_fields().items()
              if f.default is not dataclasses.MISSING and name not in NOT_IN_TRL_PPO}
    return space_values(fields)


def estimator_default(name: str, estimator: str) -> Any:
    """PPOConfig's value of a field TRL's PPOConfig lacks, at a point whose estimator is ``estimator``:
    ``num_generations`` as null means there (a group of 4 for the group estimators, else 1), the others their
    defaults."""
    if name == "num_generations":
        return default_generations(estimator)
    return settable_fields()[name].default


PRESETS: dict[str, Callable[[], dict[str, Any]]] = {"trl_defaults": trl_default_values,
                                                     "seed_guidance": guidance_values}


class UnfitValue(Exception):
    """No value of the parameter's range or choices can stand for the value given (:func:`fit_value`); a preset
    with one is skipped, an explicit entry with one is a :class:`WarmStartError`."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name}: {reason}")
        self.name = name
        self.reason = reason


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _nearest_choice(choices: Sequence[Any], value: float) -> Any:
    """The choice nearest ``value``: by ratio when all are positive (powers of two), else by difference; the smaller
    on a tie."""
    if value > 0 and all(choice > 0 for choice in choices):
        return min(choices, key=lambda choice: (abs(math.log(choice / value)), choice))
    return min(choices, key=lambda choice: (abs(choice - value), choice))


def _same(choice: Any, value: Any) -> bool:
    # 16 and 16.0 are one choice; True and 1 are not.
    return bool(choice == value) and (type(choice) is type(value) or (_is_number(choice) and _is_number(value)))


def fit_value(spec: ParamSpec, value: Any) -> tuple[Any, str | None]:
    """``value`` as a point of ``spec``, and a note (without the entry's label) when it had to move.

    A range clips ``value`` to [low, high], snaps it to low + k·step when there is a step, and rounds it to the
    nearest whole number for an int parameter; a categorical keeps a value among its choices, and takes the nearest
    one (:func:`_nearest_choice`) for a number when every choice is a number. Raises ``UnfitValue`` otherwise.
    """
    if spec.type == "categorical":
        for choice in spec.choices:
            if _same(choice, value):
                return choice, None
        if _is_number(value) and all(_is_number(choice) for choice in spec.choices):
            nearest = _nearest_choice(spec.choices, value)
            return nearest, f"{spec.name} {value!r} is not among the choices {list(spec.choices)}; the nearest, " \
                            f"{nearest!r}, taken"
        raise UnfitValue(spec.name, f"{value!r} is not among the choices {list(spec.choices)}")
    if not _is_number(value):
        raise UnfitValue(spec.name, f"{value!r} is not a number")
    assert spec.low is not None and spec.high is not None  # the study file's parser requires both
    fitted = min(max(float(value), spec.low), spec.high)
    if spec.step is not None:
        steps = round((fitted - spec.low) / spec.step)
        # The top of the grid may lie below high when the step does not divide the range.
        fitted = spec.low + min(steps, math.floor((spec.high - spec.low) / spec.step + 1e-9)) * spec.step
    result: Any = math.floor(fitted + 0.5) if spec.type == "int" else fitted
    if value < spec.low:
        return result, f"{spec.name} {value:g} is below the range's low {spec.low:g}; clipped to {result:g}"
    if value > spec.high:
        return result, f"{spec.name} {value:g} is above the range's high {spec.high:g}; clipped to {result:g}"
    # A step's grid point computed as 0.30000000000000004 is the 0.3 that was given.
    if not math.isclose(result, value, rel_tol=1e-9, abs_tol=0.0):
        grid = f"the step {spec.step:g}" if spec.step is not None else "whole numbers only"
        return result, f"{spec.name} {value:g} rounded to {result:g} ({grid})"
    return result, None


def _fit_point(label: str, space: Mapping[str, ParamSpec], given: Mapping[str, Any],
               implied: Mapping[str, Any] | None = None, base: Mapping[str, Any] | None = None) -> WarmStart:
    """The point of ``space`` with the values ``given``, those they ``implied`` for knobs left out, and TRL's
    defaults for the rest (PPOConfig's for the point's estimator where TRL's PPOConfig has none), each fitted to the
    space; the base decides the knobs in force where the space does not search them. Raises ``UnfitValue``."""
    implied = implied or {}
    base = base or {}
    defaults = trl_default_values()
    notes: list[str] = []
    followed: list[str] = []
    filled: list[str] = []
    lacking: dict[str, Any] = {}
    # The point's estimator: choose_point chooses advantage_estimator (when searched) before any other parameter.
    estimator = str(base.get("advantage_estimator") or default_estimator())

    def choose(spec: ParamSpec) -> Any:
        nonlocal estimator
        if spec.name in given:
            value = given[spec.name]
            if value is None:
                raise UnfitValue(spec.name, f"{label} sets none")
        elif spec.name in implied:
            value = implied[spec.name]
            followed.append(spec.name)
        elif spec.name in NOT_IN_TRL_PPO:
            value = lacking[spec.name] = estimator_default(spec.name, estimator)
        else:
            value = defaults.get(spec.name)
            if value is None:
                raise UnfitValue(spec.name, "no value given, and TRL's PPOConfig default is None")
            filled.append(spec.name)
        fitted, note = fit_value(spec, value)
        if note is not None:
            notes.append(f"{label}: {note}")
        if spec.name == "advantage_estimator":
            estimator = str(fitted)
        return fitted

    params = choose_point(space, choose, base)
    if lacking:
        shown = ", ".join(f"{name} {_show(value)}" for name, value in lacking.items())
        notes.insert(0, f"{label}: gives no value for {', '.join(lacking)}, which TRL's PPOConfig lacks; PPOConfig's "
                        f"defaults for advantage_estimator {estimator} used ({shown})")
    if followed:
        shown = ", ".join(f"{name} {_show(implied[name])}" for name in followed)
        notes.insert(0, f"{label}: {shown}, as a PPOConfig with the values given would have")
    if filled:
        shown = ", ".join(f"{name} {_show(defaults[name])}" for name in filled)
        notes.insert(0, f"{label}: gives no value for {', '.join(filled)}; TRL's PPOConfig defaults used ({shown})")
    return WarmStart(label, params, tuple(notes))


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:g}" if isinstance(value, float) else str(value)


def _number(value: Any) -> Any:
    """A number as YAML gave it; PyYAML reads ``1e-5`` (no dot) as a string, so such a string is read as one."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _explicit_values(where: str, entry: Mapping[str, Any], space: Mapping[str, ParamSpec]) -> dict[str, Any]:
    """A mapping's values, checked against the space (numbers read as numbers)."""
    given: dict[str, Any] = {}
    for key, value in entry.items():
        if key not in space:
            raise WarmStartError(f"{where}.{key}: not a searched parameter (the search space has "
                                 f"{', '.join(space) or 'nothing'})")
        given[key] = value if space[key].type == "categorical" else _number(value)
        if space[key].type != "categorical" and not _is_number(given[key]):
            raise WarmStartError(f"{where}.{key}: expected a number, got {value!r}")
    return given


def implied_values(given: Mapping[str, Any], base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What values given in search-space names imply for the knobs they leave out, read as PPOConfig reads its
    fields: a ``kl_target`` means ``kl_control`` adaptive; ``value_learning_rate`` left out is ``learning_rate``;
    ``kl_in_reward`` left out is the placement of the estimator given (or the base's), as null means;
    ``mini_batch_size`` left out is the rollout over TRL's default number of mini-batches (1: the whole rollout)."""
    implied: dict[str, Any] = {}
    if "kl_control" not in given and "kl_target" in given:
        implied["kl_control"] = "adaptive"
    if "value_learning_rate" not in given and "learning_rate" in given:
        implied["value_learning_rate"] = given["learning_rate"]
    estimator = given.get("advantage_estimator", (base or {}).get("advantage_estimator"))
    if "kl_in_reward" not in given and isinstance(estimator, str):
        implied["kl_in_reward"] = default_kl_in_reward(estimator)
    if "mini_batch_size" not in given and _is_number(given.get("rollout_batch_size")):
        implied["mini_batch_size"] = int(given["rollout_batch_size"]) // int(trl_default_values()["num_mini_batches"])
    return implied


def _check_idle_knobs(where: str, given: Mapping[str, Any], implied: Mapping[str, Any],
                      space: Mapping[str, ParamSpec], base: Mapping[str, Any]) -> None:
    """A value the entry's own point does not use would be dropped without a word: a β under the adaptive controller,
    a KL target under a fixed β, a coefficient on the side the KL penalty is not on, a knob its estimator does not
    read."""
    defaults = trl_default_values()
    decided = {name: given.get(name, implied.get(name, defaults.get(name)))
               for name in DECIDING_PARAMS if name in space}
    regime = regime_of(decided, space, base)
    for name in given:
        reason = None if name in DECIDING_PARAMS else regime.idle_reason(name)
        if reason is not None:
            raise WarmStartError(f"{where}.{name}: {reason}")


def warm_start_points(space: Mapping[str, ParamSpec], entries: Sequence[Any],
                      base: Mapping[str, Any] | None = None) -> list[WarmStart]:
    """Each ``enqueue`` entry (a preset's name, or a mapping of searched parameters to values) as a point of
    ``space``, in order; ``base`` (the study's) decides the estimator and KL placement where the space does not search
    them. Pure: nothing is stored. Raises :class:`WarmStartError` for an entry that is wrong in itself: an unknown
    preset, a key the space does not search, a value no choice can stand for, a value its point would not use."""
    base = base or {}
    starts = []
    for index, entry in enumerate(entries):
        where = f"enqueue[{index}]"
        if isinstance(entry, str) and entry in PRESETS:
            try:
                starts.append(_fit_point(entry, space, PRESETS[entry](), base=base))
            except UnfitValue as unfit:
                starts.append(WarmStart(entry, skipped=str(unfit)))
        elif isinstance(entry, Mapping):
            try:
                given = _explicit_values(where, entry, space)
                implied = implied_values(given, base)
                _check_idle_knobs(where, given, implied, space, base)
                starts.append(_fit_point(where, space, given, implied, base))
            except UnfitValue as unfit:
                raise WarmStartError(f"{where}.{unfit.name}: {unfit.reason}") from None
        else:
            raise WarmStartError(f"{where}: expected {' or '.join(PRESETS)}, or a mapping of searched parameters to "
                                 f"values, got {entry!r}")
    return starts


def enqueue_warm_starts(study: optuna.Study, warm_starts: Sequence[WarmStart]) -> list[str]:
    """Queue each warm start as a trial of ``study`` if it has no trials yet, and return the lines to print: each
    value moved or filled in, each entry skipped and each one queued.

    A study with trials already (a resume, or a worker that came second) gets nothing: its warm starts were queued
    when it began, and queuing them again would run them twice. Each trial carries its entry's label in the
    ``warm_start`` user attribute.
    """
    if not warm_starts or study.get_trials(deepcopy=False):
        return []
    lines: list[str] = []
    queued: list[WarmStart] = []
    for start in warm_starts:
        lines.extend(start.notes)
        if start.skipped is not None:
            lines.append(f"{start.label}: skipped: {start.skipped}")
            continue
        twin = next((earlier for earlier in queued if earlier.params == start.params), None)
        if twin is not None:
            lines.append(f"{start.label}: the same point as {twin.label}; not queued twice")
            continue
        study.enqueue_trial(dict(start.params), user_attrs={WARM_START_ATTR: start.label}, skip_if_exists=True)
        queued.append(start)
        point = ", ".join(f"{name} {_show(value)}" for name, value in start.params.items())
        lines.append(f"{start.label}: queued as a first trial ({point})")
    return lines
