"""The checks of a parsed study across its sections, run before any trial: the base and the search space agree
(no field both fixed and searched, no parameter nothing reads, no broken group), every combination of the deciding
knobs, every searched value and every warm start builds a config that runs and reports the metrics the study reads,
and the target trainer computes what the trials do.

The configs are built with the ``build`` the caller passes (``tuner.study.study_file`` passes its ``build_config``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ppo_core.config.ppo_config import ConfigError, PPOConfig
from ppo_core.models.paths import require_model
from tuner.search.space import (
    DECIDING_PARAMS,
    VIRTUAL_PARAMS,
    choose_point,
    config_values,
    first_value,
    group_problem,
    regimes,
    unused_param,
)
from tuner.study.metric_check import unreported_metric
from tuner.study.spec import StudySpec
from tuner.study.target import target_check
from tuner.study.values import fail, show_value

BuildConfig = Callable[[dict[str, Any]], PPOConfig]
MODEL_FIELDS = ("sft_model_path", "value_model_path")
"""The fields naming a model to load (``reward_model_path`` may name a function, which the config checks itself)."""
"""Builds and checks a PPOConfig from a mapping of its values (``ppo_core.config.io.build_config``)."""


def _describe(decided: Mapping[str, Any]) -> str:
    """``advantage_estimator grpo, kl_control adaptive``: a combination of the deciding knobs' choices."""
    return ", ".join(f"{name} {show_value(value)}" for name, value in decided.items())


def _example_problem(spec: StudySpec, decided: Mapping[str, Any], build: BuildConfig) -> str | None:
    """What is wrong with the config built from base plus ``decided`` and the first choice or low end of every other
    parameter in force; None when it builds and reports every metric the study reads."""
    point = choose_point(spec.search_space, lambda param: decided.get(param.name, first_value(param)), spec.base)
    try:
        config = build({**spec.base, **config_values(point, spec.base)})
    except ConfigError as error:
        field_name = str(error).split(":", 1)[0]
        return f"{'search_space' if field_name in spec.search_space else 'base'}.{error}"
    return unreported_metric(spec.named_metrics(), config)


def _check_example_config(spec: StudySpec, build: BuildConfig) -> None:
    """Build one config from base plus the first choice or low end of every searched field in force, once for each
    combination of the deciding knobs' choices (each estimator, KL placement and KL control searched), so a base
    that cannot work (a bad value, a missing model path, a coefficient an adaptive controller cannot scale) fails
    now rather than in every trial. A problem only some combinations have names the first of them."""
    problems = [(decided, _example_problem(spec, decided, build))
                for decided, _ in regimes(spec.search_space, spec.base)]
    failed = [(decided, problem) for decided, problem in problems if problem is not None]
    if failed:
        decided, problem = failed[0]
        raise fail(problem if len(failed) == len(problems) else f"{problem} (at {_describe(decided)})")


def _value_problem(spec: StudySpec, name: str, value: Any, build: BuildConfig) -> str | None:
    """What is wrong with field ``name`` at ``value``, in the example config of the first regime that uses it (every
    other parameter at its first choice or low end); None when it builds, or when what fails is another field."""
    used = next((decided for decided, regime in regimes(spec.search_space, spec.base) if regime.uses(name)), None)
    if used is None:
        return None
    point = choose_point(spec.search_space,
                         lambda param: value if param.name == name else used.get(param.name, first_value(param)),
                         spec.base)
    try:
        build({**spec.base, **config_values(point, spec.base)})
    except ConfigError as error:
        return str(error) if str(error).split(":", 1)[0] == name else None
    return None


def _check_each_value(spec: StudySpec, build: BuildConfig) -> None:
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
            problem = _value_problem(spec, name, value, build)
            if problem is not None:
                shown = repr(value) if isinstance(value, str) else show_value(value)
                raise fail(f"search_space.{name}: the {what} {shown} cannot run: {problem}")


def _check_warm_start_configs(spec: StudySpec, build: BuildConfig) -> None:
    """Build the config of every warm start, as the example config is built, so that one that cannot run fails now."""
    for index, start in enumerate(spec.enqueue):
        if start.skipped is None:
            try:
                build({**spec.base, **config_values(start.params, spec.base)})
            except ConfigError as error:
                key = f"enqueue[{index}]"
                raise fail(f"{key}{'' if start.label == key else f' ({start.label})'}: {error}") from None


def _check_base_and_space(spec: StudySpec) -> None:
    """No field both fixed in base and searched, no searched parameter that nothing reads, no broken group."""
    for name in spec.search_space:
        if name in spec.base and name not in VIRTUAL_PARAMS:
            raise fail(f"search_space.{name}: also set in base; a field is either fixed or searched")
    for problem in (unused_param(spec.search_space, spec.base), group_problem(spec.search_space, spec.base)):
        if problem is not None:
            raise fail(problem)


def check_models(spec: StudySpec) -> None:
    """Refuse, with StudySpecError, a study whose base names a model that cannot load here (a missing directory,
    a GGUF that is missing or corrupt, or whose package is not installed): it would fail every trial once stored.
    Torch-free. Checked where a study is to run, not where its file is read (``best``, ``show`` and the exports read
    a study file on machines that never train it)."""
    for name in MODEL_FIELDS:
        if spec.base.get(name) is not None:
            try:
                require_model(str(spec.base[name]), name)
            except ConfigError as error:
                raise fail(f"base.{error}") from None
    task = spec.base.get("task")
    if isinstance(task, str):
        from ppo_core.models.paths import task_model_problem

        problem = task_model_problem(task)
        if problem is not None:
            raise fail(f"base.{problem}")


def check_study(spec: StudySpec, build: BuildConfig) -> None:
    """Every check above, in order; the first problem raises StudySpecError."""
    _check_base_and_space(spec)
    _check_example_config(spec, build)
    _check_warm_start_configs(spec, build)
    _check_each_value(spec, build)
    problem = target_check(spec.target, spec.search_space, spec.base, spec.enqueue) if spec.target is not None \
        else None
    if problem is not None:
        raise fail(problem)
