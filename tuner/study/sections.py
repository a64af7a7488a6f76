"""The study file's sections other than ``search_space:``, each parsed on its own: the run's settings (name, storage,
n_trials, timeouts, heartbeat, processes), objectives, constraints, kl_guard, sampler, pruner, enqueue, seed_policy
and target. ``tuner.study.study_file.parse_study`` calls them in the file's checking order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ppo_core.config.checks import ConfigError, field_types_of
from ppo_core.config.value_types import fits
from tuner.exports import TARGET_NAMES
from tuner.search.options import PRUNER_CLASSES, SAMPLER_CLASSES, SEED_LIMIT, option_problem
from tuner.search.space import ParamSpec
from tuner.search.warm_start import WarmStart, WarmStartError, warm_start_points
from tuner.store.database import check_storage_url
from tuner.study import defaults as study_defaults
from tuner.study.constraints import Constraint
from tuner.study.reduction import REDUCTIONS
from tuner.study.seed_policy import SeedPolicy, parse_seed_policy
from tuner.study.spec import DIRECTIONS, KLGuard, Objective
from tuner.study.target import target_base
from tuner.study.values import (
    as_boolean,
    as_mapping,
    as_number,
    as_seconds,
    as_whole,
    check_keys,
    fail,
    show_value,
)
from tuner.trl_trial.arguments import TRL_TRAINERS
from tuner.trl_trial.names import in_ppo_tune_names

SAMPLERS = tuple(SAMPLER_CLASSES)
PRUNERS = (*PRUNER_CLASSES, "none")


@dataclass(frozen=True)
class RunSettings:
    """The study file's top-level settings of how the study runs, as checked (storage None: the file gives none)."""

    name: str
    n_trials: int | None
    timeout: float | None
    heartbeat_interval: int
    storage: str | None
    trial_timeout: float | None
    processes_per_trial: int


def _file_name(name: str) -> bool:
    """Whether ``name`` is one file's name on every system: no directory in it, nothing a shell or SQLite would
    read otherwise (a path separator, '..', a NUL, a line break)."""
    return name.isprintable() and not any(char in name for char in '/\\:*?"<>|') and name.strip() == name \
        and not name.startswith(".") and len(name.encode()) <= 255


def _parse_storage(storage: Any, name: str) -> str | None:
    if storage is not None:
        if not isinstance(storage, str):
            raise fail(f"storage: expected a database URL such as sqlite:///studies/x.db, got {storage!r}")
        check_storage_url(storage, in_memory=True)  # refused where it is opened: a study's workers need a file
    elif not _file_name(name + ".db"):
        raise fail(f"name: {name!r} cannot name the study's database file (<name>.db beside the study file); use "
                   "letters, digits, '-', '_' and '.', or give a storage")
    return storage


def parse_run_settings(data: dict[str, Any], storage: str | None) -> RunSettings:
    """name, n_trials, timeout, heartbeat_interval, storage (``storage``, when given, instead of the file's),
    trial_timeout and processes_per_trial, checked in that order."""
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise fail("name: the study needs a name")
    n_trials, timeout = data.get("n_trials"), data.get("timeout")
    if n_trials is not None and (not fits(n_trials, int) or n_trials < 1):
        raise fail(f"n_trials: expected a positive whole number, got {show_value(n_trials)}")
    if timeout is not None:
        timeout = as_seconds(timeout, "timeout")
    heartbeat_interval = as_whole(data.get("heartbeat_interval", 10), "heartbeat_interval")
    if heartbeat_interval < 1:
        raise fail(f"heartbeat_interval: must be >= 1 (seconds), got {heartbeat_interval}")
    storage = _parse_storage(data.get("storage") if storage is None else storage, name)
    trial_timeout, processes_per_trial = data.get("trial_timeout"), data.get("processes_per_trial", 1)
    if trial_timeout is not None:
        trial_timeout = as_seconds(trial_timeout, "trial_timeout")
    if not fits(processes_per_trial, int) or processes_per_trial < 1:
        raise fail(f"processes_per_trial: expected a positive integer, got {processes_per_trial!r}")
    return RunSettings(name, n_trials, timeout, heartbeat_interval, storage, trial_timeout, processes_per_trial)


def _parse_reduction(spec: dict[str, Any], key: str, default: str | None) -> tuple[str, int]:
    """The ``reduce`` and ``k`` of an objective or a constraint entry (``default`` None: reduce is required)."""
    reduce = spec.get("reduce", default)
    if reduce not in REDUCTIONS:
        raise fail(f"{key}.reduce: expected one of {', '.join(REDUCTIONS)}, got {reduce!r}")
    k = as_whole(spec.get("k", Objective.k), f"{key}.k")
    if k < 1:
        raise fail(f"{key}.k: must be >= 1")
    return reduce, k


def parse_objectives(raw: Any) -> list[Objective]:
    if not isinstance(raw, list) or not raw:
        raise fail("objectives: expected a non-empty list of {metric, direction, reduce}")
    objectives = []
    for index, item in enumerate(raw):
        key = f"objectives[{index}]"
        spec = as_mapping(item, key)
        check_keys(spec, ("metric", "direction", "reduce", "k"), f"{key}.")
        if not isinstance(spec.get("metric"), str):
            raise fail(f"{key}.metric: expected a metric name such as objective/gold_score")
        objective = Objective(spec["metric"], spec.get("direction", "maximize"),
                              *_parse_reduction(spec, key, Objective.reduce))
        if objective.direction not in DIRECTIONS:
            raise fail(f"{key}.direction: expected maximize or minimize, got {objective.direction!r}")
        objectives.append(objective)
    return objectives


def _constraint_bounds(spec: dict[str, Any], key: str) -> dict[str, float | None]:
    """A constraint entry's max and min: finite numbers, at least one of them, min not above max."""
    bounds = {name: None if spec.get(name) is None else as_number(spec[name], f"{key}.{name}")
              for name in ("max", "min")}
    for name, bound in bounds.items():
        if bound is not None and not math.isfinite(bound):
            raise fail(f"{key}.{name}: must be a finite number, got {bound!r}")
    if bounds["max"] is None and bounds["min"] is None:
        raise fail(f"{key}: needs a max or a min (or both)")
    if bounds["max"] is not None and bounds["min"] is not None and bounds["min"] > bounds["max"]:
        raise fail(f"{key}: min {bounds['min']:g} is greater than max {bounds['max']:g}")
    return bounds


def parse_constraints(raw: Any) -> list[Constraint]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise fail("constraints: expected a list of {metric, reduce, max and/or min}")
    constraints: list[Constraint] = []
    for index, item in enumerate(raw):
        key = f"constraints[{index}]"
        spec = as_mapping(item, key)
        check_keys(spec, ("metric", "reduce", "k", "max", "min"), f"{key}.")
        if not isinstance(spec.get("metric"), str):
            raise fail(f"{key}.metric: expected a metric name such as objective/kl")
        # No default: a budget on the run's largest value and one on its last are different promises.
        reduce, k = _parse_reduction(spec, key, None)
        bounds = _constraint_bounds(spec, key)
        constraint = Constraint(spec["metric"], reduce, k, bounds["max"], bounds["min"])
        if constraint in constraints:
            raise fail(f"{key}: the same as constraints[{constraints.index(constraint)}]")
        constraints.append(constraint)
    return constraints


def parse_hacking_guard(raw: Any) -> list[Constraint]:
    """``hacking_guard``: bounds a held-out signal of hacking may not cross at any evaluation, [{metric, max and/or
    min}]; a trial whose evaluation crosses one stops there, pruned with the reason (``tuner.trial.reporter``)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise fail("hacking_guard: expected a list of {metric, max and/or min}, e.g. "
                   "[{metric: eval/repeated_3grams, max: 0.05}]")
    bounds: list[Constraint] = []
    for index, item in enumerate(raw):
        key = f"hacking_guard[{index}]"
        spec = as_mapping(item, key)
        check_keys(spec, ("metric", "max", "min"), f"{key}.")
        if not isinstance(spec.get("metric"), str):
            raise fail(f"{key}.metric: expected a metric name such as eval/repeated_3grams")
        limits = _constraint_bounds(spec, key)
        bounds.append(Constraint(spec["metric"], "last", 1, limits["max"], limits["min"]))
    return bounds


def parse_enqueue(raw: Any, space: dict[str, ParamSpec], base: dict[str, Any]) -> list[WarmStart]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise fail("enqueue: expected a list of trl_defaults, seed_guidance or mappings of searched parameters to "
                   "values")
    try:
        return warm_start_points(space, raw, base)
    except WarmStartError as error:
        raise fail(str(error)) from None


def parse_kl_guard(raw: Any) -> KLGuard:
    spec = as_mapping(raw, "kl_guard")
    allowed = tuple(KLGuard.__dataclass_fields__)
    check_keys(spec, allowed, "kl_guard.")
    readers: dict[type, Callable[[Any, str], Any]] = {bool: as_boolean, int: as_whole, float: as_number}
    checked: dict[str, Any] = {}
    kinds = field_types_of(KLGuard)
    for name, value in spec.items():
        reader = readers.get(kinds[name])
        checked[name] = reader(value, f"kl_guard.{name}") if reader is not None else value
    if not isinstance(checked.get("metric", ""), str):
        raise fail(f"kl_guard.metric: expected a metric name, got {checked['metric']!r}")
    guard = KLGuard(**checked)
    if guard.threshold <= 0 or not math.isfinite(guard.threshold):
        raise fail(f"kl_guard.threshold: must be a positive number of nats, got {guard.threshold!r}")
    if guard.window < 2 or guard.min_updates < 1:
        raise fail("kl_guard.window: must be >= 2 (and min_updates >= 1)")
    if not 0.5 <= guard.confidence < 1:
        raise fail(f"kl_guard.confidence: must be at least 0.5 and below 1, got {guard.confidence!r}")
    if guard.confirmations < 1:
        raise fail(f"kl_guard.confirmations: must be >= 1, got {guard.confirmations!r}")
    return guard


def parse_sampler(raw: Any, objectives: Sequence[Objective]) -> dict[str, Any]:
    """The ``sampler:`` section; with no ``name``, the default for these objectives
    (``tuner.study.defaults.default_sampler``) with the file's options on top."""
    spec = dict(as_mapping(raw, "sampler"))
    named = "name" in spec
    if not named:
        spec = {**study_defaults.default_sampler([(o.metric, o.direction) for o in objectives]), **spec}
    if spec["name"] not in SAMPLERS:
        raise fail(f"sampler.name: expected one of {', '.join(SAMPLERS)}, got {spec.get('name')!r}")
    problem = option_problem(SAMPLER_CLASSES[spec["name"]], {k: v for k, v in spec.items() if k != "name"}, "sampler")
    if problem is not None:
        if not named:  # the option may be one of another sampler's: say which sampler the file got by default
            problem += f" (no sampler.name given: this study's default is {spec['name']}; name one to use another)"
        raise fail(problem)
    seed = spec.get("seed")
    if seed is not None and not 0 <= seed < SEED_LIMIT:
        raise fail(f"sampler.seed: must be between 0 and {SEED_LIMIT - 1}, got {seed}")
    return spec


def parse_pruner(raw: Any) -> dict[str, Any]:
    spec = dict(as_mapping(raw, "pruner")) or {"name": "none"}
    if spec.get("name", "none") not in PRUNERS:
        raise fail(f"pruner.name: expected one of {', '.join(PRUNERS)}, got {spec.get('name')!r}")
    spec.setdefault("name", "none")
    if spec["name"] != "none":
        problem = option_problem(PRUNER_CLASSES[spec["name"]], {k: v for k, v in spec.items() if k != "name"},
                                 "pruner")
        if problem is not None:
            raise fail(problem)
    return spec


def parse_study_seed_policy(raw: Any, n_objectives: int) -> SeedPolicy:
    """The ``seed_policy:`` section, read by ``tuner.study.seed_policy``; its problem raised as the study file's."""
    seed_policy = parse_seed_policy(raw, n_objectives)
    if isinstance(seed_policy, str):
        raise fail(seed_policy)
    return seed_policy


PPO_CORE = "ppo_core"


def parse_trainer(trainer: Any, target: Any) -> tuple[str, Any]:
    """The study's ``trainer`` and its ``target``: a TRL trainer is its own target (its trials may compute only what
    it computes, and its export is the run), so a file that names another target is refused."""
    if trainer is None or trainer == PPO_CORE:
        return PPO_CORE, target
    if trainer not in TRL_TRAINERS:
        raise fail(f"trainer: unknown trainer {show_value(trainer)} (expected one of "
                   f"{', '.join((PPO_CORE, *TRL_TRAINERS))})")
    if target is not None and target != trainer:
        raise fail(f"target: {show_value(target)} with trainer {trainer}: a TRL trial runs in its own trainer, "
                   "which is its target; leave target unset")
    return trainer, trainer


def trainer_names_read(trainer: str, base: Any, search_space: Any) -> tuple[Any, Any]:
    """A TRL study's ``base`` and ``search_space`` (raw) in ppo-tune's names: they may use TRL's
    (:mod:`tuner.trl_trial.names`); a ppo_core study's as they are."""
    if trainer == PPO_CORE:
        return base, search_space
    try:
        return in_ppo_tune_names(trainer, base, search_space)
    except ConfigError as error:
        raise fail(str(error)) from None


def target_filled_base(target: Any, base: dict[str, Any], search_space: dict[str, ParamSpec]) -> dict[str, Any]:
    """``base`` under the ``target:`` trainer's profile (``base`` itself when the file names no target)."""
    if target is None:
        return base
    if target not in TARGET_NAMES:
        raise fail(f"target: unknown trainer {target!r} (expected one of {', '.join(TARGET_NAMES)})")
    return target_base(target, base, search_space)
