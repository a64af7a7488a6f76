"""The study file's ``search_space:`` section, parsed into :class:`~tuner.search.space.ParamSpec` objects: each
parameter's range or choices, checked against the values its PPOConfig field takes (read from the field's type).

How a parsed space is searched (conditions, regimes, suggesting a point) is ``tuner.search.space``'s job.
"""

from __future__ import annotations

import difflib
import typing
from typing import Any, Literal

from ppo_core.config.checks import field_choices
from ppo_core.config.ppo_config import PPOConfig, field_types, settable_fields
from ppo_core.config.value_types import describe_type, fits, type_parts
from tuner.search.space import KL_CONTROL_MODES, VIRTUAL_PARAMS, ParamSpec
from tuner.study.values import as_boolean, as_finite, as_mapping, check_keys, fail, show_value


def parse_param(name: str, raw: Any) -> ParamSpec:
    key = f"search_space.{name}"
    spec = as_mapping(raw, key)
    check_keys(spec, ("type", "low", "high", "log", "step", "choices"), f"{key}.")
    kind = spec.get("type")
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise fail(f"{key}.choices: a categorical parameter needs a non-empty list of choices")
        for choice in choices:
            if choice is not None and not isinstance(choice, (bool, int, float, str)):
                raise fail(f"{key}.choices: {choice!r} is not a choice Optuna can make (a number, a string, true, "
                           "false or null)")
        return ParamSpec(name, "categorical", choices=tuple(choices))
    if kind not in ("float", "int"):
        raise fail(f"{key}.type: expected float, int or categorical, got {kind!r}")
    if "low" not in spec or "high" not in spec:
        raise fail(f"{key}: {kind} parameters need low and high")
    low, high = as_finite(spec["low"], f"{key}.low"), as_finite(spec["high"], f"{key}.high")
    log = as_boolean(spec.get("log", False), f"{key}.log")
    step = None if spec.get("step") is None else as_finite(spec["step"], f"{key}.step")
    if step is not None and (step <= 0 or (kind == "int" and not step.is_integer())):
        raise fail(f"{key}.step: must be {'a whole number ' if kind == 'int' else ''}> 0, got {step:g}")
    if low > high:
        raise fail(f"{key}: low {low:g} is greater than high {high:g}")
    if log and low <= 0:
        raise fail(f"{key}: log scale needs low > 0, got {low:g}")
    if log and step is not None:
        raise fail(f"{key}: step and log cannot be used together")
    if kind == "int" and not (low.is_integer() and high.is_integer()):
        raise fail(f"{key}: int parameters need whole-number low and high")
    return ParamSpec(name, kind, low, high, log, step)


def field_values(name: str) -> tuple[Any, ...] | None:
    """Every value a PPOConfig field takes when it takes only a few (its listed choices, as advantage_estimator lists
    ppo_core.config.estimator_traits's names; a Literal, a bool, either or null); None for open fields."""
    choices = field_choices(PPOConfig, name)
    if choices is not None:
        return tuple(choices)
    values: list[Any] = []
    for part in type_parts(field_types()[name]):
        if typing.get_origin(part) is Literal:
            values += typing.get_args(part)
        elif part is bool:
            values += [True, False]
        elif part is type(None):
            values.append(None)
        else:
            return None
    return tuple(values)


def _check_types(spec: ParamSpec) -> None:
    """Every choice, and a range itself, of a type the field takes: a choice of the wrong type would fail its trials
    one by one (a number field searched with a string among its choices)."""
    annotation = field_types()[spec.name]
    takes = describe_type(annotation, plain=True)
    if spec.type != "categorical":
        # One value the range suggests answers for all of them: a whole number for an int range, a fraction for a
        # float range.
        if not fits(1 if spec.type == "int" else 0.5, annotation):
            # A field of whole numbers can still be searched with an int range.
            searchable = "int or categorical" if fits(1, annotation) else "categorical"
            raise fail(f"search_space.{spec.name}: must be {searchable} ({spec.name} takes {takes})")
        return
    for choice in spec.choices:
        # finite: the config refuses an inf or a nan, so every trial given one would fail.
        if not fits(choice, annotation, finite=True):
            shown = repr(choice) if isinstance(choice, str) else show_value(choice)
            # A number field names the number it wants, without its null.
            numbers = [part for part in type_parts(annotation) if part in (int, float)]
            what = describe_type(numbers[0], plain=True) if numbers else takes
            raise fail(f"search_space.{spec.name}: {shown} is not {what}")


def _check_choices(spec: ParamSpec) -> None:
    """A field that takes only a few values is searched as a categorical of them: every choice, not only the first
    one the example config is built with (a bad later choice would fail its trials one by one)."""
    allowed = field_values(spec.name)
    if allowed is None:
        _check_types(spec)
        return
    shown = ", ".join(show_value(value) for value in allowed)
    if spec.type != "categorical":
        raise fail(f"search_space.{spec.name}: must be categorical, with choices from {shown}")
    for choice in spec.choices:
        if not any(choice == value and type(choice) is type(value) for value in allowed):
            close = difflib.get_close_matches(choice, [str(v) for v in allowed], n=1) if isinstance(choice, str) \
                else []
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            what = "an advantage estimator" if spec.name == "advantage_estimator" else f"a value of {spec.name}"
            raise fail(f"search_space.{spec.name}: {choice!r} is not {what}{hint}; expected one of {shown}")


def _check_generations(space: dict[str, ParamSpec]) -> None:
    generations = space.get("num_generations")
    if generations is not None and (generations.type == "float" or not all(
            isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in generations.choices)):
        raise fail("search_space.num_generations: must be int or categorical, with whole numbers >= 1 (responses "
                   "per prompt)")


def _check_kl_control(space: dict[str, ParamSpec]) -> None:
    if "kl_control" in space:
        kl_control = space["kl_control"]
        if kl_control.type != "categorical" or not all(choice in KL_CONTROL_MODES for choice in kl_control.choices):
            raise fail("search_space.kl_control: must be categorical with choices from [fixed, adaptive]")
        if "adaptive" in kl_control.choices and "kl_target" not in space:
            raise fail("search_space.kl_control: choosing 'adaptive' needs a kl_target range")


def _check_batch_sizes(space: dict[str, ParamSpec]) -> None:
    for batch_key in ("rollout_batch_size", "mini_batch_size"):
        spec = space.get(batch_key)
        if spec is not None and (spec.type != "categorical"
                                 or not all(isinstance(c, int) and c > 0 and c & (c - 1) == 0 for c in spec.choices)):
            raise fail(f"search_space.{batch_key}: must be categorical with powers of two as choices")


def parse_search_space(raw: Any) -> dict[str, ParamSpec]:
    """Each parameter of the section, checked against its PPOConfig field; then the checks of the parameters that
    are no field (kl_control, the batch sizes) or take only some of their field's values (num_generations)."""
    known = settable_fields()
    space = {}
    for name, spec in as_mapping(raw, "search_space").items():
        if name not in known and name not in VIRTUAL_PARAMS:
            raise fail(f"search_space.{name}: PPOConfig has no field {name!r}")
        space[name] = parse_param(name, spec)
        if name in known:
            _check_choices(space[name])
    _check_generations(space)
    _check_kl_control(space)
    _check_batch_sizes(space)
    return space
