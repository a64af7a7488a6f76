"""The study file (``studies/*.yaml``): what to tune, how to search, how to judge and when to stop a trial.

Every problem raises :class:`StudyConfigError` with one line naming the key; the CLI exits with 2.
"""

from __future__ import annotations

import difflib
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ppo_core.config import ConfigError, field_types, settable_fields
from ppo_core.config_io import build_config, read_mapping
from ppo_core.errors import InputError
from ppo_core.estimator_traits import estimator_names
from tuner import study_defaults
from tuner.attrs import DEFAULT_KL_METRIC, DEFAULT_KL_THRESHOLD
from tuner.constraints import Constraint
from tuner.database import check_storage_url, default_storage_url
from tuner.frontier_sampler import FRONTIER_METRICS, FRONTIER_SAMPLER
from tuner.messages import one_line
from tuner.metric_check import unreported_metric
from tuner.options import PRUNER_CLASSES, SAMPLER_CLASSES, SEED_LIMIT, option_problem
from tuner.reduction import REDUCTIONS, reduction_label
from tuner.search_space import (
    DECIDING_PARAMS,
    KL_CONTROL_MODES,
    VIRTUAL_PARAMS,
    ParamSpec,
    choose_point,
    config_values,
    first_value,
    group_problem,
    regimes,
    unused_param,
)
from tuner.seed_policy import SeedPolicy, parse_seed_policy
from tuner.study_target import TARGET_NAMES, target_base, target_check
from tuner.warm_start import WarmStart, WarmStartError, warm_start_points

SAMPLERS = tuple(SAMPLER_CLASSES)
PRUNERS = (*PRUNER_CLASSES, "none")
Direction = Literal["maximize", "minimize"]
DIRECTIONS: tuple[Direction, ...] = typing.get_args(Direction)
TOP_LEVEL_KEYS = ("name", "storage", "n_trials", "timeout", "sampler", "pruner", "objectives", "kl_guard", "base",
                  "search_space", "heartbeat_interval", "description", "trial_timeout", "processes_per_trial",
                  "enqueue", "constraints", "target", "seed_policy")


class StudyConfigError(InputError):
    """The study file is wrong; one line that names the key."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


@dataclass(frozen=True)
class Objective:
    metric: str
    direction: Direction = "maximize"
    reduce: str = "mean_last_k"
    k: int = 5

    @property
    def label(self) -> str:
        return reduction_label(self)


@dataclass(frozen=True)
class KLGuard:
    """When a trial's KL counts as blown up (the seed guidance: above 10-15 or 15-20 nats is divergence)."""

    enabled: bool = True
    metric: str = DEFAULT_KL_METRIC
    threshold: float = DEFAULT_KL_THRESHOLD
    predict: bool = True
    window: int = 5
    min_updates: int = 3
    predict_min_fraction: float = 0.5


@dataclass
class StudySpec:
    name: str
    storage: str
    path: Path
    n_trials: int | None
    timeout: float | None
    sampler: dict[str, Any]
    pruner: dict[str, Any]
    objectives: list[Objective]
    kl_guard: KLGuard
    base: dict[str, Any]
    search_space: dict[str, ParamSpec] = field(default_factory=dict)
    heartbeat_interval: int = 10
    trial_timeout: float | None = None
    """Seconds one trial's process may run; past it the process is killed and the trial is FAIL. None: no limit."""
    processes_per_trial: int = 1
    """Processes that train one trial together, under ``accelerate launch`` when more than one."""
    enqueue: list[WarmStart] = field(default_factory=list)
    """The study's first trials (``enqueue``: trl_defaults, seed_guidance or values), as points of the search space;
    ``tuner.warm_start.enqueue_warm_starts`` queues them on a new study."""
    constraints: list[Constraint] = field(default_factory=list)
    """Bounds on reduced metrics (e.g. a KL budget) that a feasible trial keeps; set on each trial for Optuna."""
    seed_policy: SeedPolicy = field(default_factory=SeedPolicy)
    """Which seeds trials train on, and so what chooses the winner (tuner.seed_policy)."""
    target: str | None = None
    """The trainer the winner will run in (an export format: trl-grpo, verl, ...): its profile fills the base, and
    no trial may compute what it does not (tuner.study_target)."""
    definition: dict[str, Any] = field(default_factory=dict)
    """The study file's mapping as read: stored on the study, so that a resume can tell what changed and
    ``ppo-tune validate`` can rebuild the spec from the storage alone."""

    def named_metrics(self) -> list[tuple[str, str]]:
        """(key in the study file, metric name) for each metric the study reads from its runs."""
        named = [(f"objectives[{index}].metric", objective.metric) for index, objective in enumerate(self.objectives)]
        named += [(f"constraints[{index}].metric", constraint.metric)
                  for index, constraint in enumerate(self.constraints)]
        if self.sampler["name"] == FRONTIER_SAMPLER:  # it reads where held-out gold peaks in held-out KL
            named += [(f"sampler.name {FRONTIER_SAMPLER}", metric) for metric in FRONTIER_METRICS]
        return named + ([("kl_guard.metric", self.kl_guard.metric)] if self.kl_guard.enabled else [])

    @property
    def directions(self) -> list[Direction]:
        return [objective.direction for objective in self.objectives]

    @property
    def multi_objective(self) -> bool:
        return len(self.objectives) > 1


def _fail(message: str) -> StudyConfigError:
    return StudyConfigError(message)


def _mapping(value: Any, key: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail(f"{key}: expected a mapping, got {value!r}")
    return value


def _check_keys(data: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
    for key in data:
        if key not in allowed:
            # Quoted when it would not read as itself: empty, padded with spaces, unprintable or not a string.
            shown = key if isinstance(key, str) and key and key.isprintable() and key.strip() == key else repr(key)
            raise _fail(f"{where}{shown}: unknown key (expected one of {', '.join(allowed)})")


def _boolean(value: Any, key: str) -> bool:
    """YAML's true or false; a string such as 'maybe' or 'no' would otherwise be read as true."""
    if not isinstance(value, bool):
        raise _fail(f"{key}: expected true or false, got {value!r}")
    return value


def _whole(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(f"{key}: expected a whole number, got {value!r}")
    return value


def _number(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise _fail(f"{key}: expected a number, got {value!r}")
    try:
        return float(value)
    except ValueError:
        raise _fail(f"{key}: expected a number, got {value!r}") from None


def _finite(value: Any, key: str) -> float:
    number = _number(value, key)
    if not math.isfinite(number):
        raise _fail(f"{key}: must be a finite number, got {number}")
    return number


def _seconds(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(f"{key}: expected a number of seconds, got {value!r}")
    if not value > 0 or not math.isfinite(value):
        raise _fail(f"{key}: must be > 0 seconds, got {value:g}")
    return float(value)


def parse_param(name: str, raw: Any) -> ParamSpec:
    key = f"search_space.{name}"
    spec = _mapping(raw, key)
    _check_keys(spec, ("type", "low", "high", "log", "step", "choices"), f"{key}.")
    kind = spec.get("type")
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise _fail(f"{key}.choices: a categorical parameter needs a non-empty list of choices")
        for choice in choices:
            if choice is not None and not isinstance(choice, (bool, int, float, str)):
                raise _fail(f"{key}.choices: {choice!r} is not a choice Optuna can make (a number, a string, true, "
                            "false or null)")
        return ParamSpec(name, "categorical", choices=tuple(choices))
    if kind not in ("float", "int"):
        raise _fail(f"{key}.type: expected float, int or categorical, got {kind!r}")
    if "low" not in spec or "high" not in spec:
        raise _fail(f"{key}: {kind} parameters need low and high")
    low, high = _finite(spec["low"], f"{key}.low"), _finite(spec["high"], f"{key}.high")
    log = _boolean(spec.get("log", False), f"{key}.log")
    step = None if spec.get("step") is None else _finite(spec["step"], f"{key}.step")
    if step is not None and (step <= 0 or (kind == "int" and not step.is_integer())):
        raise _fail(f"{key}.step: must be {'a whole number ' if kind == 'int' else ''}> 0, got {step:g}")
    if low > high:
        raise _fail(f"{key}: low {low:g} is greater than high {high:g}")
    if log and low <= 0:
        raise _fail(f"{key}: log scale needs low > 0, got {low:g}")
    if log and step is not None:
        raise _fail(f"{key}: step and log cannot be used together")
    if kind == "int" and not (low.is_integer() and high.is_integer()):
        raise _fail(f"{key}: int parameters need whole-number low and high")
    return ParamSpec(name, kind, low, high, log, step)


def _field_values(name: str) -> tuple[Any, ...] | None:
    """Every value a PPOConfig field takes when it takes only a few (a Literal, a bool, either or null); None for
    open fields. advantage_estimator's are the names of ppo_core.estimator_traits."""
    if name == "advantage_estimator":
        return estimator_names()
    annotation = field_types()[name]
    parts = typing.get_args(annotation) if typing.get_origin(annotation) not in (Literal, None) else (annotation,)
    values: list[Any] = []
    for part in parts:
        if typing.get_origin(part) is Literal:
            values += typing.get_args(part)
        elif part is bool:
            values += [True, False]
        elif part is type(None):
            values.append(None)
        else:
            return None
    return tuple(values)


_TYPE_WORDS = {int: "a whole number", float: "a number", str: "a string", bool: "true or false", list: "a list",
               type(None): "null"}


def _value_types(name: str) -> tuple[type, ...]:
    """The plain types a value of PPOConfig field ``name`` may have (``float | None`` -> float and NoneType)."""
    annotation = field_types()[name]
    parts = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) \
        else (annotation,)
    return tuple(typing.get_origin(part) or part for part in parts)


def _fits(value: Any, kinds: tuple[type, ...]) -> bool:
    if isinstance(value, bool):
        return bool in kinds
    if isinstance(value, float):
        return float in kinds and math.isfinite(value)
    if isinstance(value, int):
        return int in kinds or float in kinds
    return any(isinstance(value, kind) for kind in kinds)


def _check_types(spec: ParamSpec) -> None:
    """Every choice, and a range itself, of a type the field takes: a choice of the wrong type would fail its trials
    one by one (a number field searched with a string among its choices)."""
    kinds = _value_types(spec.name)
    if spec.type != "categorical":
        wanted = int if spec.type == "int" else float
        if not (wanted in kinds or (wanted is int and float in kinds)):
            searchable = "int or categorical" if int in kinds else "categorical"
            takes = " or ".join(_TYPE_WORDS.get(kind, kind.__name__) for kind in kinds)
            raise _fail(f"search_space.{spec.name}: must be {searchable} ({spec.name} takes {takes})")
        return
    for choice in spec.choices:
        if not _fits(choice, kinds):
            shown = repr(choice) if isinstance(choice, str) else _show(choice)
            wanted_word = " or ".join(_TYPE_WORDS.get(kind, kind.__name__) for kind in kinds)
            what = "a whole number" if kinds[0] is int else "a number" if float in kinds else wanted_word
            raise _fail(f"search_space.{spec.name}: {shown} is not {what}")


def _check_choices(spec: ParamSpec) -> None:
    """A field that takes only a few values is searched as a categorical of them: every choice, not only the first
    one the example config is built with (a bad later choice would fail its trials one by one)."""
    allowed = _field_values(spec.name)
    if allowed is None:
        _check_types(spec)
        return
    shown = ", ".join(_show(value) for value in allowed)
    if spec.type != "categorical":
        raise _fail(f"search_space.{spec.name}: must be categorical, with choices from {shown}")
    for choice in spec.choices:
        if not any(choice == value and type(choice) is type(value) for value in allowed):
            close = difflib.get_close_matches(choice, [str(v) for v in allowed], n=1) if isinstance(choice, str) \
                else []
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            what = "an advantage estimator" if spec.name == "advantage_estimator" else f"a value of {spec.name}"
            raise _fail(f"search_space.{spec.name}: {choice!r} is not {what}{hint}; expected one of {shown}")


def _parse_search_space(raw: Any) -> dict[str, ParamSpec]:
    known = settable_fields()
    space = {}
    for name, spec in _mapping(raw, "search_space").items():
        if name not in known and name not in VIRTUAL_PARAMS:
            raise _fail(f"search_space.{name}: PPOConfig has no field {name!r}")
        space[name] = parse_param(name, spec)
        if name in known:
            _check_choices(space[name])
    generations = space.get("num_generations")
    if generations is not None and (generations.type == "float" or not all(
            isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in generations.choices)):
        raise _fail("search_space.num_generations: must be int or categorical, with whole numbers >= 1 (responses "
                    "per prompt)")
    if "kl_control" in space:
        kl_control = space["kl_control"]
        if kl_control.type != "categorical" or not all(choice in KL_CONTROL_MODES for choice in kl_control.choices):
            raise _fail("search_space.kl_control: must be categorical with choices from [fixed, adaptive]")
        if "adaptive" in kl_control.choices and "kl_target" not in space:
            raise _fail("search_space.kl_control: choosing 'adaptive' needs a kl_target range")
    for batch_key in ("rollout_batch_size", "mini_batch_size"):
        spec = space.get(batch_key)
        if spec is not None and (spec.type != "categorical"
                                 or not all(isinstance(c, int) and c > 0 and c & (c - 1) == 0 for c in spec.choices)):
            raise _fail(f"search_space.{batch_key}: must be categorical with powers of two as choices")
    return space


def _parse_reduction(spec: dict[str, Any], key: str, default: str | None) -> tuple[str, int]:
    """The ``reduce`` and ``k`` of an objective or a constraint entry (``default`` None: reduce is required)."""
    reduce = spec.get("reduce", default)
    if reduce not in REDUCTIONS:
        raise _fail(f"{key}.reduce: expected one of {', '.join(REDUCTIONS)}, got {reduce!r}")
    k = _whole(spec.get("k", Objective.k), f"{key}.k")
    if k < 1:
        raise _fail(f"{key}.k: must be >= 1")
    return reduce, k


def _parse_objectives(raw: Any) -> list[Objective]:
    if not isinstance(raw, list) or not raw:
        raise _fail("objectives: expected a non-empty list of {metric, direction, reduce}")
    objectives = []
    for index, item in enumerate(raw):
        key = f"objectives[{index}]"
        spec = _mapping(item, key)
        _check_keys(spec, ("metric", "direction", "reduce", "k"), f"{key}.")
        if not isinstance(spec.get("metric"), str):
            raise _fail(f"{key}.metric: expected a metric name such as objective/gold_score")
        objective = Objective(spec["metric"], spec.get("direction", "maximize"),
                              *_parse_reduction(spec, key, Objective.reduce))
        if objective.direction not in DIRECTIONS:
            raise _fail(f"{key}.direction: expected maximize or minimize, got {objective.direction!r}")
        objectives.append(objective)
    return objectives


def _parse_constraints(raw: Any) -> list[Constraint]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _fail("constraints: expected a list of {metric, reduce, max and/or min}")
    constraints: list[Constraint] = []
    for index, item in enumerate(raw):
        key = f"constraints[{index}]"
        spec = _mapping(item, key)
        _check_keys(spec, ("metric", "reduce", "k", "max", "min"), f"{key}.")
        if not isinstance(spec.get("metric"), str):
            raise _fail(f"{key}.metric: expected a metric name such as objective/kl")
        # No default: a budget on the run's largest value and one on its last are different promises.
        reduce, k = _parse_reduction(spec, key, None)
        bounds = {name: None if spec.get(name) is None else _number(spec[name], f"{key}.{name}")
                  for name in ("max", "min")}
        for name, bound in bounds.items():
            if bound is not None and not math.isfinite(bound):
                raise _fail(f"{key}.{name}: must be a finite number, got {bound!r}")
        if bounds["max"] is None and bounds["min"] is None:
            raise _fail(f"{key}: needs a max or a min (or both)")
        if bounds["max"] is not None and bounds["min"] is not None and bounds["min"] > bounds["max"]:
            raise _fail(f"{key}: min {bounds['min']:g} is greater than max {bounds['max']:g}")
        constraint = Constraint(spec["metric"], reduce, k, bounds["max"], bounds["min"])
        if constraint in constraints:
            raise _fail(f"{key}: the same as constraints[{constraints.index(constraint)}]")
        constraints.append(constraint)
    return constraints


def _parse_enqueue(raw: Any, space: dict[str, ParamSpec], base: dict[str, Any]) -> list[WarmStart]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _fail("enqueue: expected a list of trl_defaults, seed_guidance or mappings of searched parameters to "
                    "values")
    try:
        return warm_start_points(space, raw, base)
    except WarmStartError as error:
        raise _fail(str(error)) from None


def _parse_kl_guard(raw: Any) -> KLGuard:
    spec = _mapping(raw, "kl_guard")
    allowed = tuple(KLGuard.__dataclass_fields__)
    _check_keys(spec, allowed, "kl_guard.")
    readers: dict[str, Callable[[Any, str], Any]] = {"bool": _boolean, "int": _whole, "float": _number}
    checked: dict[str, Any] = {}
    for name, value in spec.items():
        kind = KLGuard.__dataclass_fields__[name].type  # a string under postponed annotations
        reader = readers.get(str(kind))
        checked[name] = reader(value, f"kl_guard.{name}") if reader is not None else value
    if not isinstance(checked.get("metric", ""), str):
        raise _fail(f"kl_guard.metric: expected a metric name, got {checked['metric']!r}")
    guard = KLGuard(**checked)
    if guard.threshold <= 0 or not math.isfinite(guard.threshold):
        raise _fail(f"kl_guard.threshold: must be a positive number of nats, got {guard.threshold!r}")
    if guard.window < 2 or guard.min_updates < 1:
        raise _fail("kl_guard.window: must be >= 2 (and min_updates >= 1)")
    return guard


def _parse_sampler(raw: Any) -> dict[str, Any]:
    spec = dict(_mapping(raw, "sampler"))
    if "name" not in spec:
        spec = {**study_defaults.SAMPLER, **spec}  # no sampler named: the default search, the file's options on top
    if spec["name"] not in SAMPLERS:
        raise _fail(f"sampler.name: expected one of {', '.join(SAMPLERS)}, got {spec.get('name')!r}")
    problem = option_problem(SAMPLER_CLASSES[spec["name"]], {k: v for k, v in spec.items() if k != "name"}, "sampler")
    if problem is not None:
        raise _fail(problem)
    seed = spec.get("seed")
    if seed is not None and not 0 <= seed < SEED_LIMIT:
        raise _fail(f"sampler.seed: must be between 0 and {SEED_LIMIT - 1}, got {seed}")
    return spec


def _parse_pruner(raw: Any) -> dict[str, Any]:
    spec = dict(_mapping(raw, "pruner")) or {"name": "none"}
    if spec.get("name", "none") not in PRUNERS:
        raise _fail(f"pruner.name: expected one of {', '.join(PRUNERS)}, got {spec.get('name')!r}")
    spec.setdefault("name", "none")
    if spec["name"] != "none":
        problem = option_problem(PRUNER_CLASSES[spec["name"]], {k: v for k, v in spec.items() if k != "name"},
                                 "pruner")
        if problem is not None:
            raise _fail(problem)
    return spec


def _file_name(name: str) -> bool:
    """Whether ``name`` is one file's name on every system: no directory in it, nothing a shell or SQLite would
    read otherwise (a path separator, '..', a NUL, a line break)."""
    return name.isprintable() and not any(char in name for char in '/\\:*?"<>|') and name.strip() == name \
        and not name.startswith(".") and len(name.encode()) <= 255


def parse_study(data: dict[str, Any], path: Path, storage: str | None = None) -> StudySpec:
    """Validate a study mapping (as read from ``path``); ``storage``, when given, is used instead of the mapping's
    (a ``--storage`` flag), and is not added to the definition the study stores."""
    _check_keys(data, TOP_LEVEL_KEYS, "")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise _fail("name: the study needs a name")
    n_trials, timeout = data.get("n_trials"), data.get("timeout")
    if n_trials is not None and (isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1):
        raise _fail(f"n_trials: expected a positive whole number, got {_show(n_trials)}")
    if timeout is not None:
        timeout = _seconds(timeout, "timeout")
    heartbeat_interval = _whole(data.get("heartbeat_interval", 10), "heartbeat_interval")
    if heartbeat_interval < 1:
        raise _fail(f"heartbeat_interval: must be >= 1 (seconds), got {heartbeat_interval}")
    storage = data.get("storage") if storage is None else storage
    if storage is not None:
        if not isinstance(storage, str):
            raise _fail(f"storage: expected a database URL such as sqlite:///studies/x.db, got {storage!r}")
        check_storage_url(storage, in_memory=True)  # refused where it is opened: a study's workers need a file
    elif not _file_name(name + ".db"):
        raise _fail(f"name: {name!r} cannot name the study's database file (<name>.db beside the study file); use "
                    "letters, digits, '-', '_' and '.', or give a storage")
    trial_timeout, processes_per_trial = data.get("trial_timeout"), data.get("processes_per_trial", 1)
    if trial_timeout is not None:
        trial_timeout = _seconds(trial_timeout, "trial_timeout")
    if isinstance(processes_per_trial, bool) or not isinstance(processes_per_trial, int) or processes_per_trial < 1:
        raise _fail(f"processes_per_trial: expected a positive integer, got {processes_per_trial!r}")
    base = _mapping(data.get("base"), "base")
    search_space = _parse_search_space(data.get("search_space"))
    objectives = _parse_objectives(data.get("objectives"))
    seed_policy = parse_seed_policy(data.get("seed_policy"), len(objectives))
    if isinstance(seed_policy, str):
        raise _fail(seed_policy)
    target = data.get("target")
    if target is not None:
        if target not in TARGET_NAMES:
            raise _fail(f"target: unknown trainer {target!r} (expected one of {', '.join(TARGET_NAMES)})")
        base = target_base(target, base, search_space)
    spec = StudySpec(
        name=name,
        storage=storage or default_storage_url(path, name),
        path=path,
        n_trials=n_trials,
        timeout=timeout,
        sampler=_parse_sampler(data.get("sampler")),
        pruner=_parse_pruner(data.get("pruner")),
        objectives=objectives,
        kl_guard=_parse_kl_guard(data.get("kl_guard")),
        base=base,
        search_space=search_space,
        heartbeat_interval=heartbeat_interval,
        trial_timeout=trial_timeout,
        processes_per_trial=processes_per_trial,
        enqueue=_parse_enqueue(data.get("enqueue"), search_space, base),
        constraints=_parse_constraints(data.get("constraints")),
        seed_policy=seed_policy,
        target=target,
        definition=data,
    )
    for name in spec.search_space:
        if name in base and name not in VIRTUAL_PARAMS:
            raise _fail(f"search_space.{name}: also set in base; a field is either fixed or searched")
    for problem in (unused_param(spec.search_space, base), group_problem(spec.search_space, base)):
        if problem is not None:
            raise _fail(problem)
    _check_example_config(spec)
    _check_warm_start_configs(spec)
    _check_each_value(spec)
    problem = target_check(target, search_space, base, spec.enqueue) if target is not None else None
    if problem is not None:
        raise _fail(problem)
    return spec


def _show(value: Any) -> str:
    """A value as YAML writes it: true, false, null."""
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _describe(decided: Mapping[str, Any]) -> str:
    """``advantage_estimator grpo, kl_control adaptive``: a combination of the deciding knobs' choices."""
    return ", ".join(f"{name} {_show(value)}" for name, value in decided.items())


def _example_problem(spec: StudySpec, decided: Mapping[str, Any]) -> str | None:
    """What is wrong with the config built from base plus ``decided`` and the first choice or low end of every other
    parameter in force; None when it builds and reports every metric the study reads."""
    point = choose_point(spec.search_space, lambda param: decided.get(param.name, first_value(param)), spec.base)
    try:
        config = build_config({**spec.base, **config_values(point, spec.base)})
    except ConfigError as error:
        field_name = str(error).split(":", 1)[0]
        return f"{'search_space' if field_name in spec.search_space else 'base'}.{error}"
    return unreported_metric(spec.named_metrics(), config)


def _check_example_config(spec: StudySpec) -> None:
    """Build one config from base plus the first choice or low end of every searched field in force, once for each
    combination of the deciding knobs' choices (each estimator, KL placement and KL control searched), so a base
    that cannot work (a bad value, a missing model path, a coefficient an adaptive controller cannot scale) fails
    now rather than in every trial. A problem only some combinations have names the first of them."""
    problems = [(decided, _example_problem(spec, decided)) for decided, _ in regimes(spec.search_space, spec.base)]
    failed = [(decided, problem) for decided, problem in problems if problem is not None]
    if failed:
        decided, problem = failed[0]
        raise _fail(problem if len(failed) == len(problems) else f"{problem} (at {_describe(decided)})")


def _value_problem(spec: StudySpec, name: str, value: Any) -> str | None:
    """What is wrong with field ``name`` at ``value``, in the example config of the first regime that uses it (every
    other parameter at its first choice or low end); None when it builds, or when what fails is another field."""
    used = next((decided for decided, regime in regimes(spec.search_space, spec.base) if regime.uses(name)), None)
    if used is None:
        return None
    point = choose_point(spec.search_space,
                         lambda param: value if param.name == name else used.get(param.name, first_value(param)),
                         spec.base)
    try:
        build_config({**spec.base, **config_values(point, spec.base)})
    except ConfigError as error:
        return str(error) if str(error).split(":", 1)[0] == name else None
    return None


def _check_each_value(spec: StudySpec) -> None:
    """Build the example config once with each choice, and with each end of each range, of every searched field:
    a choice or an end that no trial could run with (a negative kl_coef) fails now, not in the trials that draw it."""
    for name, param in spec.search_space.items():
        if name in VIRTUAL_PARAMS or name in DECIDING_PARAMS:
            continue  # the virtual ones are checked as they are parsed, the deciding ones by _check_example_config
        ends = [("low end", param.low), ("high end", param.high)] if param.type != "categorical" else []
        values = ends or [("choice", choice) for choice in param.choices]
        for what, value in values:
            if param.type == "int" and value is not None:
                value = int(value)
            problem = _value_problem(spec, name, value)
            if problem is not None:
                shown = repr(value) if isinstance(value, str) else _show(value)
                raise _fail(f"search_space.{name}: the {what} {shown} cannot run: {problem}")


def _check_warm_start_configs(spec: StudySpec) -> None:
    """Build the config of every warm start, as the example config is built, so that one that cannot run fails now."""
    for index, start in enumerate(spec.enqueue):
        if start.skipped is None:
            try:
                build_config({**spec.base, **config_values(start.params, spec.base)})
            except ConfigError as error:
                key = f"enqueue[{index}]"
                raise _fail(f"{key}{'' if start.label == key else f' ({start.label})'}: {error}") from None


def load_study_spec(path: str | Path, storage: str | None = None) -> StudySpec:
    """Read and validate a study file; ``storage`` replaces the file's (a ``--storage`` flag)."""
    try:
        data = read_mapping(path, "study")
    except ConfigError as error:
        raise _fail(str(error)) from None
    spec = parse_study(data, Path(path), storage)
    if not spec.search_space:
        # Every trial would run the same configuration.
        raise _fail("search_space: empty; a study needs at least one parameter to search, e.g. learning_rate: "
                    "{type: float, low: 1.0e-6, high: 1.0e-4, log: true}")
    return spec
