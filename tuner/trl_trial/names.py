"""A TRL study's ``base`` and ``search_space`` in TRL's own field names: GRPOConfig's or RLOOConfig's, with
ModelConfig's and the script's, as a ``trl grpo`` / ``trl rloo`` user writes them.

A study with ``trainer: trl-grpo`` or ``trl-rloo`` may write each field in TRL's name or in ppo-tune's. Where TRL's
name is not ppo-tune's, or means something else under the same name, the study file's two sections are read into
ppo-tune's names here, before anything else reads them, so the trial's config, the export and every check see one
config: ``best --format trl-grpo`` prints the TRL names back with the values written.

What is read how:

- a rename, same value: ``num_iterations`` is ``num_ppo_epochs``, ``epsilon`` is ``cliprange`` (both bounds, as TRL's
  ``epsilon_high`` defaults to it), ``epsilon_high`` is ``cliprange_high``, ``max_completion_length`` is
  ``response_length``, ``model_name_or_path`` is ``sft_model_path``, ``reward_model_name_or_path`` is
  ``reward_model_path``; for RLOO, ``beta`` (its reward's KL penalty) is ``kl_coef``;
- GRPOConfig's ``loss_type`` values: ``grpo`` is ``seq_mean_token_mean``, ``dr_grpo`` is ``seq_mean_token_sum_norm``,
  ``dapo`` is ``token_mean`` (the step's own tokens, which the export prints as ``bnpo`` when a step is one
  micro-batch, where the two are equal); ``bnpo`` is ``bnpo``;
- the batch, in base only: TRL's ``steps_per_generation`` S (micro-batches a generation) and
  ``gradient_accumulation_steps`` G (micro-batches a step) are ppo-tune's ``gradient_accumulation_steps`` S and
  ``num_mini_batches`` S / G; ``max_steps`` (optimizer steps, one process) is ``total_episodes``;
  ``warmup_steps`` counts optimizer steps (a fraction below 1 is ``warmup_ratio``). Searched, they would change two
  of ppo-tune's fields at once, so only TRL's ``gradient_accumulation_steps`` alone may be searched (each generation
  one optimizer step);
- the trainer's estimator: GRPO's or RLOO's advantages unless the file says ``advantage_estimator``.

A TRL field that ppo-tune does not carry to its trials (``top_p``, ``delta``, ``use_vllm``, ...) is a ConfigError
naming it: the trial would run without it. Fields either section leaves unset take ppo-tune's defaults, not TRL's;
the export prints every one.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ppo_core.config.ppo_config import ConfigError, settable_fields
from tuner.trl_trial.arguments import TRL_TRAINERS, trl_fields

# TRL's name -> ppo-tune's, the value as it is (both trainers)
RENAMED = {
    "model_name_or_path": "sft_model_path",
    "reward_model_name_or_path": "reward_model_path",
    "num_iterations": "num_ppo_epochs",
    "max_completion_length": "response_length",
    "epsilon": "cliprange",
    "epsilon_high": "cliprange_high",
}
RENAMED_BY_TRAINER: dict[str, dict[str, str]] = {"trl-grpo": {}, "trl-rloo": {"beta": "kl_coef"}}
# GRPOConfig's loss_type values that ppo-tune names otherwise (tuner.exports.trl_grpo_rloo.LOSS_TYPES the other way)
GRPO_LOSS_TYPES = {"grpo": "seq_mean_token_mean", "dr_grpo": "seq_mean_token_sum_norm", "dapo": "token_mean"}
ESTIMATORS = {"trl-grpo": "grpo", "trl-rloo": "rloo"}
# TRL's batch and schedule fields, which set ppo-tune's fields in combination (read from the base alone)
TRL_ACCUMULATION, TRL_GENERATION_STEPS, TRL_MAX_STEPS, TRL_WARMUP = (
    "gradient_accumulation_steps", "steps_per_generation", "max_steps", "warmup_steps")
COUPLED = (TRL_ACCUMULATION, TRL_GENERATION_STEPS, TRL_MAX_STEPS, TRL_WARMUP)


def in_ppo_tune_names(trainer: str, base: Any, search_space: Any) -> tuple[Any, Any]:
    """The study file's ``base`` and ``search_space`` (raw mappings) of a TRL ``trainer``, in ppo-tune's names and
    values; anything that is not a mapping is returned as it is, for the study file's own checks to name."""
    if not isinstance(base, Mapping) or not isinstance(search_space, (Mapping, type(None))):
        return base, search_space
    space = dict(search_space or {})
    renames = {**RENAMED, **RENAMED_BY_TRAINER[trainer]}
    _refuse_uncarried(trainer, base, space)
    new_space = _space_in_ppo_tune_names(trainer, space, base, renames)
    renamed: dict[str, Any] = {renames.get(str(key), str(key)): _value(trainer, key, value)
                               for key, value in base.items() if key not in COUPLED}
    new_base = _with_batch(renamed, base, new_space)
    implied = {"advantage_estimator": ESTIMATORS[trainer],
               # A study that names its own dataset trains on it, not on the default built-in task, as TRL would.
               **({"task": None} if "dataset_name" in new_base else {})}
    for key, value in implied.items():
        if key not in new_space:
            new_base.setdefault(key, value)
    _refuse_twice_named(base, space, renames)
    return new_base, (new_space if search_space is not None else None)


def _value(trainer: str, key: str, value: Any) -> Any:
    """``value`` of TRL's field ``key`` as ppo-tune spells it."""
    if trainer == "trl-grpo" and key == "loss_type" and isinstance(value, str):
        return GRPO_LOSS_TYPES.get(value, value)
    if key == "reward_funcs":  # TRL's scripts import a.b.f; ppo-tune's spec is a.b:f (a path or hub name as it is)
        return [_function_spec(spec) for spec in value] if isinstance(value, list) else _function_spec(value)
    return value


def _function_spec(spec: Any) -> Any:
    if not isinstance(spec, str) or ":" in spec or "/" in spec or "." not in spec or Path(spec).exists():
        return spec
    module, function = spec.rsplit(".", 1)
    return f"{module}:{function}"


def _refuse_twice_named(base: Mapping[str, Any], space: Mapping[str, Any], renames: Mapping[str, str]) -> None:
    """ConfigError where TRL's name and ppo-tune's of one field are both written (which would win is a guess)."""
    for section, keys in (("base", base), ("search_space", space)):
        for theirs, ours in renames.items():
            if theirs in keys and ours in keys:
                raise ConfigError(f"{section}.{theirs}: TRL's name for {ours}, which the section also sets; write "
                                  "one of them")


def _space_in_ppo_tune_names(trainer: str, space: dict[str, Any], base: Mapping[str, Any],
                             renames: Mapping[str, str]) -> dict[str, Any]:
    for key in (TRL_GENERATION_STEPS, TRL_MAX_STEPS, TRL_WARMUP):
        if key in space:
            raise ConfigError(f"search_space.{key}: in TRL's meaning it sets two of ppo-tune's fields at once; set it "
                              f"in base, or search {_searchable_instead(key)}")
    if TRL_ACCUMULATION in space and (TRL_GENERATION_STEPS in base or "num_mini_batches" in base):
        raise ConfigError(f"search_space.{TRL_ACCUMULATION}: searched beside steps_per_generation or num_mini_batches "
                          "in base, it would change ppo-tune's mini-batches too; search it alone (one optimizer step "
                          "a generation)")
    new_space = {}
    for key, spec in space.items():
        if key == "loss_type" and trainer == "trl-grpo" and isinstance(spec, Mapping) \
                and isinstance(spec.get("choices"), list):
            spec = {**spec, "choices": [_value(trainer, key, choice) for choice in spec["choices"]]}
        new_space[renames.get(key, key)] = spec
    return new_space


def _searchable_instead(key: str) -> str:
    return {TRL_GENERATION_STEPS: "gradient_accumulation_steps alone (one optimizer step a generation)",
            TRL_MAX_STEPS: "nothing for the run's length: a study compares runs of one length",
            TRL_WARMUP: "warmup_ratio (a fraction of the run)"}[key]


def _with_batch(renamed: Mapping[str, Any], base: Mapping[str, Any], space: Mapping[str, Any]) -> dict[str, Any]:
    """``renamed`` (the base in ppo-tune's names, TRL's batch and schedule fields left out) with those fields of
    ``base`` read into ppo-tune's (the module's docstring); ``space`` in ppo-tune's names."""
    new = dict(renamed)
    accumulation, generation_steps = base.get(TRL_ACCUMULATION), base.get(TRL_GENERATION_STEPS)
    if generation_steps is not None or accumulation is not None:
        if "num_mini_batches" in base:
            raise ConfigError("base.num_mini_batches: a TRL study counts mini-batches as steps_per_generation / "
                              "gradient_accumulation_steps; write those, not num_mini_batches")
        per_step = _positive_int(accumulation if accumulation is not None else 1, TRL_ACCUMULATION)
        per_generation = _positive_int(generation_steps if generation_steps is not None else per_step,
                                       TRL_GENERATION_STEPS)
        if per_generation % per_step:
            raise ConfigError(f"base.{TRL_GENERATION_STEPS}: {per_generation} is not a multiple of "
                              f"gradient_accumulation_steps {per_step}, as TRL requires")
        new["gradient_accumulation_steps"], new["num_mini_batches"] = per_generation, per_generation // per_step
    steps_per_update = _steps_per_update(new, space)
    if base.get(TRL_MAX_STEPS) is not None:
        new["total_episodes"] = _episodes(base[TRL_MAX_STEPS], new, space, steps_per_update)
    if base.get(TRL_WARMUP) is not None:
        warmup = base[TRL_WARMUP]
        if isinstance(warmup, float) and 0 < warmup < 1:
            new["warmup_ratio"] = warmup  # transformers 5 reads a fraction below 1 as a ratio
        else:
            steps = _positive_int(warmup, TRL_WARMUP, allow_zero=True)
            if steps_per_update is None or steps % steps_per_update:
                raise ConfigError(f"base.{TRL_WARMUP}: {steps} optimizer steps is not a whole number of PPO updates "
                                  f"({steps_per_update or 'a searched number of'} steps each); write a fraction of "
                                  "the run below 1")
            new["warmup_steps"] = steps // steps_per_update
    return new


def _steps_per_update(base: Mapping[str, Any], space: Mapping[str, Any]) -> int | None:
    """Optimizer steps a PPO update takes (mini-batches x epochs), or None while either is searched."""
    if {"num_mini_batches", "num_ppo_epochs", "gradient_accumulation_steps"} & set(space):
        return None
    return int(_value_of(base, "num_mini_batches")) * int(_value_of(base, "num_ppo_epochs"))


def _episodes(max_steps: Any, base: Mapping[str, Any], space: Mapping[str, Any], steps_per_update: int | None) -> int:
    steps = _positive_int(max_steps, TRL_MAX_STEPS)
    searched = {"per_device_train_batch_size", "gradient_accumulation_steps"} & set(space)
    if steps_per_update is None or searched:
        raise ConfigError(f"base.{TRL_MAX_STEPS}: with the batch or the epochs searched, {steps} optimizer steps are "
                          "a different number of episodes in each trial; give the run's length as total_episodes")
    if steps % steps_per_update:
        raise ConfigError(f"base.{TRL_MAX_STEPS}: {steps} is not a whole number of PPO updates ({steps_per_update} "
                          "optimizer steps each: mini-batches x num_iterations)")
    per_update = int(_value_of(base, "per_device_train_batch_size")) \
        * int(_value_of(base, "gradient_accumulation_steps"))
    return steps // steps_per_update * per_update


def _value_of(base: Mapping[str, Any], name: str) -> Any:
    """The base's value of a PPOConfig field, else the field's default."""
    return base[name] if name in base else settable_fields()[name].default


def _positive_int(value: Any, key: str, allow_zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < (0 if allow_zero else 1):
        raise ConfigError(f"base.{key}: expected a {'non-negative' if allow_zero else 'positive'} integer, "
                          f"got {value!r}")
    return value


def _refuse_uncarried(trainer: str, base: Mapping[str, Any], space: Mapping[str, Any]) -> None:
    """ConfigError for the first field that TRL's config has and ppo-tune carries to no trial."""
    carried = set(settable_fields()) | set(RENAMED) | set(RENAMED_BY_TRAINER[trainer]) | set(COUPLED)
    uncarried = [(section, key) for section, keys in (("base", base), ("search_space", space)) for key in keys
                 if key not in carried]
    if not uncarried:
        return  # TRL is imported only to name a field (a dashboard reading a stored study imports no TRL)
    trl_fields = _trl_fields(trainer)
    for section, key in uncarried:
        if key in trl_fields:
            raise ConfigError(f"{section}.{key}: a field of TRL's {trl_fields[key]} that ppo-tune does not carry to "
                              "its trials, which would run without it (the fields it carries: docs/reference.md, "
                              "\"Trials in TRL's own trainer\")")


def _trl_fields(trainer: str) -> dict[str, str]:
    """TRL's fields for ``trainer`` by name, with their class's name; empty without TRL (``ppo-tune run`` names the
    install command then, and an unknown field is named by the study file's own checks)."""
    if importlib.util.find_spec("trl") is None:
        return {}
    fields: dict[str, str] = {}
    for class_name in (TRL_TRAINERS[trainer][0], "ModelConfig", "ScriptArguments"):
        fields.update(dict.fromkeys(trl_fields(class_name), class_name))
    return fields
