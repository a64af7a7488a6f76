"""The checks any config dataclass runs when it is built, before its own rules: list fields given one value, and
each value's type against its field's annotation (by ``ppo_core.config.value_types``'s rules) and choices. Every problem
raises :class:`ConfigError` with a one-line message that names the field."""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import TYPE_CHECKING, Any

from ppo_core.config.value_types import describe_type, fits
from ppo_core.errors import InputError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

# TRL GRPOConfig's loss_type values and their names here (verl's loss_agg_mode names): a TRL user's value gets told
# which one to write. TRL's dapo divides each step's token sum by the rollout batch's mean tokens per step, where
# token_mean divides by the step's own tokens: the same when every step holds as many tokens.
TRL_LOSS_TYPES = {"dapo": "token_mean", "grpo": "seq_mean_token_mean", "dr_grpo": "seq_mean_token_sum_norm"}
REPORT_TO = ("none", "all", "tensorboard", "wandb", "trackio", "mlflow", "comet_ml", "aim", "clearml", "dvclive")


class ConfigError(InputError):
    """A config value is wrong; the message is one line and names the field."""


_FIELD_TYPES: dict[type, dict[str, Any]] = {}


def field_types_of(cls: type) -> dict[str, Any]:
    """A config class's field annotations, resolved once: every config built reads them."""
    if cls not in _FIELD_TYPES:
        _FIELD_TYPES[cls] = typing.get_type_hints(cls)
    return _FIELD_TYPES[cls]


def settable_names(config: DataclassInstance) -> list[str]:
    """The user-settable fields of ``config`` (derived fields excluded)."""
    return [f.name for f in dataclasses.fields(config) if f.init]


def _list_item_type(annotation: Any) -> Any:
    """T for ``list[T]`` or ``list[T] | None``; None for other annotations."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(candidate) is list:
            return typing.get_args(candidate)[0]
    return None


def accept_single_values_for_lists(config: DataclassInstance) -> None:
    """``report_to: tensorboard`` or ``--set reward_funcs=a:f,b:g`` mean one- or several-item lists."""
    hints = field_types_of(type(config))
    for name in settable_names(config):
        value = getattr(config, name)
        if _list_item_type(hints[name]) is None:
            continue
        if isinstance(value, str):
            setattr(config, name, [part.strip() for part in value.split(",") if part.strip()])
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            setattr(config, name, [value])
        elif isinstance(value, tuple):
            setattr(config, name, list(value))


_FIELD_CHOICES: dict[type, dict[str, Any]] = {}


def field_choices(cls: type, name: str) -> Any:
    """The values a field takes where its metadata lists them (``choices``, as argparse reads it: a live view such as
    a table's keys, read at the time of asking); None for a field without. The fields' metadata is read once per
    class, as their annotations are: every config built checks every field."""
    if cls not in _FIELD_CHOICES:
        _FIELD_CHOICES[cls] = {f.name: f.metadata.get("choices") for f in dataclasses.fields(cls)}
    return _FIELD_CHOICES[cls][name]


def describe_field(cls: type, name: str) -> str:
    """What a field takes, in words: its choices, else its annotation (:func:`describe_type`)."""
    choices = field_choices(cls, name)
    if choices is not None:
        return "one of " + ", ".join(repr(choice) for choice in choices)
    return describe_type(field_types_of(cls)[name])


def check_types(config: DataclassInstance) -> None:
    """Each value against its field's annotation and choices, and every number finite: an ``.inf`` or ``.nan`` would
    reach the first update and end the run as a divergence there."""
    hints = field_types_of(type(config))
    for name in settable_names(config):
        value = getattr(config, name)
        annotation = hints[name]
        choices = field_choices(type(config), name)
        if not fits(value, annotation) or (choices is not None and value not in choices):
            hint = f"; TRL GRPOConfig's {value!r} is {TRL_LOSS_TYPES[value]!r} here" \
                if name == "loss_type" and value in TRL_LOSS_TYPES else ""
            raise ConfigError(f"{name}: expected {describe_field(type(config), name)}, got {value!r}{hint}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{name}: must be a finite number, got {value!r}")
        if isinstance(value, list) and any(isinstance(v, float) and not math.isfinite(v) for v in _flat(value)):
            raise ConfigError(f"{name}: must be finite numbers, got {value!r}")
        if annotation in (float, float | None) and isinstance(value, int):
            setattr(config, name, float(value))
        item_type = _list_item_type(annotation)
        if isinstance(value, list) and item_type is float:
            setattr(config, name, [float(v) for v in value])
        elif isinstance(value, list) and item_type == list[float]:  # pairs such as a schedule's [update, value]
            setattr(config, name, [[float(v) for v in item] for item in value])


def _flat(values: list[Any]) -> list[Any]:
    """A list's items, and the items of the lists it holds."""
    return [v for item in values for v in (item if isinstance(item, list) else [item])]


def require(condition: bool, name: str, rule: str, value: Any) -> None:
    """Raise ``name: must be <rule>, got <value>`` unless ``condition`` holds."""
    if not condition:
        raise ConfigError(f"{name}: must be {rule}, got {value!r}")
