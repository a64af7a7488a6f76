"""The checks a PPOConfig runs when it is built: list fields given one value, types, then ranges and the rules
between fields. Every problem raises :class:`ConfigError` with a one-line message that names the field."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import TYPE_CHECKING, Any, Literal

from ppo_core.errors import InputError

if TYPE_CHECKING:
    from ppo_core.config import PPOConfig

REPORT_TO = ("none", "all", "tensorboard", "wandb", "trackio", "mlflow", "comet_ml", "aim", "clearml", "dvclive")


class ConfigError(InputError):
    """A config value is wrong; the message is one line and names the field."""


_FIELD_TYPES: dict[type, dict[str, Any]] = {}


def field_types_of(cls: type) -> dict[str, Any]:
    """A config class's field annotations, resolved once: every config built reads them."""
    if cls not in _FIELD_TYPES:
        _FIELD_TYPES[cls] = typing.get_type_hints(cls)
    return _FIELD_TYPES[cls]


def settable_names(config: PPOConfig) -> list[str]:
    """The user-settable fields of ``config`` (derived fields excluded)."""
    return [f.name for f in dataclasses.fields(config) if f.init]


def _list_item_type(annotation: Any) -> Any:
    """T for ``list[T]`` or ``list[T] | None``; None for other annotations."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(candidate) is list:
            return typing.get_args(candidate)[0]
    return None


def accept_single_values_for_lists(config: PPOConfig) -> None:
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


def _type_matches(value: Any, annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    if origin is list:
        (item,) = typing.get_args(annotation)
        return isinstance(value, list) and all(_type_matches(v, item) for v in value)
    if origin in (typing.Union, types.UnionType):
        return any(_type_matches(value, arg) for arg in typing.get_args(annotation))
    if origin is Literal:
        return value in typing.get_args(annotation)
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    return True


def describe_type(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe_type(arg) for arg in typing.get_args(annotation))
    if origin is Literal:
        return "one of " + ", ".join(repr(arg) for arg in typing.get_args(annotation))
    if annotation is type(None):
        return "null"
    if origin is list:
        return f"list of {describe_type(typing.get_args(annotation)[0])}"
    return getattr(annotation, "__name__", str(annotation))


def check_types(config: PPOConfig) -> None:
    hints = field_types_of(type(config))
    for name in settable_names(config):
        value = getattr(config, name)
        annotation = hints[name]
        if not _type_matches(value, annotation):
            raise ConfigError(f"{name}: expected {describe_type(annotation)}, got {value!r}")
        if annotation in (float, float | None) and isinstance(value, int):
            setattr(config, name, float(value))
        if isinstance(value, list) and _list_item_type(annotation) is float:
            setattr(config, name, [float(v) for v in value])


def _require(condition: bool, name: str, rule: str, value: Any) -> None:
    if not condition:
        raise ConfigError(f"{name}: must be {rule}, got {value!r}")


def check_ranges(c: PPOConfig) -> None:
    for name in ("learning_rate", "weight_decay", "max_grad_norm", "vf_coef", "entropy_coef",
                 "cliprange_value", "kl_coef", "beta", "warmup_steps"):
        _require(getattr(c, name) >= 0, name, ">= 0", getattr(c, name))
    if c.value_learning_rate is not None:
        _require(c.value_learning_rate >= 0, "value_learning_rate", ">= 0", c.value_learning_rate)
    _require(c.adam_epsilon > 0, "adam_epsilon", "> 0", c.adam_epsilon)
    _require(c.cliprange > 0, "cliprange", "> 0", c.cliprange)
    for name in ("cliprange_low", "cliprange_high"):
        if getattr(c, name) is not None:
            _require(getattr(c, name) > 0, name, "> 0 (null means cliprange)", getattr(c, name))
    if c.cliprange_low is not None:
        # Below 1 - 1 = 0 the ratio could never be clipped from below.
        _require(c.cliprange_low < 1, "cliprange_low", "< 1 (the ratio is clipped at 1 - cliprange_low)",
                 c.cliprange_low)
    _require(0.0 <= c.lam <= 1.0, "lam", "in [0, 1]", c.lam)
    _require(0.0 <= c.gamma <= 1.0, "gamma", "in [0, 1]", c.gamma)
    _require(0.0 <= c.warmup_ratio < 1.0, "warmup_ratio", "in [0, 1)", c.warmup_ratio)
    _require(c.temperature > 0, "temperature", "> 0", c.temperature)
    for name in ("per_device_train_batch_size", "gradient_accumulation_steps", "num_mini_batches",
                 "num_ppo_epochs", "local_rollout_forward_batch_size", "kl_horizon", "num_eval_prompts",
                 "num_eval_samples"):
        _require(getattr(c, name) >= 1, name, ">= 1", getattr(c, name))
    _require(c.num_sample_generations >= 0, "num_sample_generations", ">= 0", c.num_sample_generations)
    _require(c.num_train_epochs > 0, "num_train_epochs", "> 0", c.num_train_epochs)
    if c.eval_steps is not None:
        _require(c.eval_steps > 0, "eval_steps", "> 0", c.eval_steps)
        # At 1 and above it counts updates; a fraction of the run is only meaningful below 1.
        _require(c.eval_steps < 1 or float(c.eval_steps).is_integer(), "eval_steps",
                 "a whole number of updates when >= 1 (below 1, a fraction of the run's updates)", c.eval_steps)
    if c.total_episodes is not None:
        _require(c.total_episodes >= 1, "total_episodes", ">= 1", c.total_episodes)
    if c.response_length is not None:
        _require(c.response_length >= 1, "response_length", ">= 1", c.response_length)
    if c.kl_target is not None:
        _require(c.kl_target > 0, "kl_target", "> 0 nats", c.kl_target)
        coefficient = "kl_coef" if c.kl_penalty_in_reward else "beta"
        _require(c.kl_coefficient > 0, coefficient, "> 0 when kl_target is set (the adaptive controller scales it)",
                 c.kl_coefficient)
    _check_estimator(c)
    if c.missing_eos_penalty is not None:
        _require(c.missing_eos_penalty >= 0, "missing_eos_penalty", ">= 0", c.missing_eos_penalty)
    if c.stop_token is not None and c.stop_token_id is not None:
        raise ConfigError("stop_token_id: cannot be set together with stop_token; set stop_token to null")
    local_batch = c.per_device_train_batch_size * c.gradient_accumulation_steps
    if local_batch % c.num_mini_batches:
        raise ConfigError(
            f"num_mini_batches: {c.num_mini_batches} must divide the rollout batch "
            f"per_device_train_batch_size x gradient_accumulation_steps = {local_batch}"
        )
    mini_batch = local_batch // c.num_mini_batches
    if mini_batch % c.per_device_train_batch_size:
        raise ConfigError(
            f"per_device_train_batch_size: {c.per_device_train_batch_size} must divide the mini-batch "
            f"{mini_batch}; make gradient_accumulation_steps a multiple of num_mini_batches"
        )
    if c.use_peft:
        _require(c.lora_r >= 1, "lora_r", ">= 1", c.lora_r)
        _require(c.lora_alpha > 0, "lora_alpha", "> 0", c.lora_alpha)
        _require(0.0 <= c.lora_dropout < 1.0, "lora_dropout", "in [0, 1)", c.lora_dropout)
    if c.max_prompt_length is not None:
        _require(c.max_prompt_length >= 1, "max_prompt_length", ">= 1", c.max_prompt_length)
    for tracker in c.report_to:
        _require(tracker in REPORT_TO, "report_to", f"one of {', '.join(REPORT_TO)}", tracker)
    if c.task is None:
        for name in ("sft_model_path", "dataset_name"):
            if getattr(c, name) is None:
                raise ConfigError(f"{name}: required when task is null")
        if not c.reward_specs:
            raise ConfigError("reward_model_path: required when task is null (or give reward_funcs)")
    if c.reward_weights is not None:
        rewards = len(c.reward_specs) or 1  # none named: the task's own reward model
        if len(c.reward_weights) != rewards:
            raise ConfigError(f"reward_weights: {len(c.reward_weights)} weights for {rewards} rewards "
                              f"({', '.join(c.reward_specs) or 'the task reward model'})")


def _check_estimator(c: PPOConfig) -> None:
    """The advantage estimator's needs: a group of responses per prompt for the group estimators, and whole groups
    on every process (its share of a rollout batch is per_device_train_batch_size x gradient_accumulation_steps)."""
    from ppo_core.config import GROUP_ESTIMATORS

    if c.num_generations is not None:
        _require(c.num_generations >= 1, "num_generations", ">= 1", c.num_generations)
    generations = c.generations_per_prompt
    if c.advantage_estimator in GROUP_ESTIMATORS and generations < 2:
        raise ConfigError(f"num_generations: advantage_estimator {c.advantage_estimator} compares the responses to "
                          f"one prompt, so it needs >= 2, got {generations}")
    local_batch = c.per_device_train_batch_size * c.gradient_accumulation_steps
    if local_batch % generations:
        raise ConfigError(f"num_generations: {generations} must divide the rollout batch per_device_train_batch_size "
                          f"x gradient_accumulation_steps = {local_batch}, so that each process holds whole groups")
