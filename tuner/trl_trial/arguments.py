"""A TRL trial's arguments: the export of its config (``best --format trl-grpo`` / ``trl-rloo``), split into what
TRL's trainer config, its ``ModelConfig`` and its script's ``ScriptArguments`` each take.

The trial runs with these and nothing else of ours, so the flags the export prints are the run the trial was.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ppo_core.config.ppo_config import ConfigError, PPOConfig
from tuner.exports import exported
from tuner.exports._common import Export

# study-file name -> (TRL's config class, TRL's trainer class)
TRL_TRAINERS = {"trl-grpo": ("GRPOConfig", "GRPOTrainer"), "trl-rloo": ("RLOOConfig", "RLOOTrainer")}
# What the trial decides itself, whatever the export says: where TRL writes (nowhere that outlives the trial), that
# it reports to no tracker (the study's database is the record), and that it saves no checkpoints.
TRIAL_OWNED = {"report_to": "none", "save_strategy": "no", "logging_strategy": "steps"}
# Settings of the machine rather than of the run: a trial on a GPU-less machine runs on the CPU whatever the config
# says, as ppo_core's trials do.
MACHINE_FIELDS = ("use_cpu",)


@dataclass(frozen=True)
class TrialArguments:
    """Keyword arguments for TRL's classes, as the export of one trial's config gives them."""

    trainer: str
    config: dict[str, Any]
    """For GRPOConfig or RLOOConfig."""
    model: dict[str, Any]
    """For trl.ModelConfig: the model path and the LoRA settings."""
    script: dict[str, Any]
    """For trl.ScriptArguments and the script's reward flags: reward_model_name_or_path, reward_funcs, datasets."""
    comments: tuple[str, ...]
    """The export's comments: what TRL lacks of this config, and what it counts differently."""


def trl_fields(class_name: str) -> set[str]:
    """The field names of the installed TRL's class ``class_name``."""
    import trl

    return {field.name for field in dataclasses.fields(getattr(trl, class_name))}


# Fields the export comments on because TRL's script cannot take them, and which the trial serves itself: it builds
# the built-in task's model, prompts and rewards as a ppo_core trial does.
SERVED_BY_THE_TRIAL = ("task", "task_seed")
UNUSED = ": unused by ppo-tune"  # the export's comment on a field that this config ignores anyway


def _refuse_what_trl_lacks(trainer: str, export: Export) -> None:
    """ConfigError for the first field the export could only comment on: TRL's trainer would run without it."""
    set_fields = {name for _, _, name in export.settings}
    for name, line in export.comments:
        if not name or name in set_fields or name in SERVED_BY_THE_TRIAL or UNUSED in line:
            continue
        why = line.split(": ", 1)[1] if ": " in line else line
        raise ConfigError(f"{name}: {TRL_TRAINERS[trainer][1]} cannot run it ({why})")


def trial_arguments(trainer: str, config: PPOConfig) -> TrialArguments:
    """The arguments TRL's ``trainer`` ("trl-grpo" or "trl-rloo") runs ``config``'s trial with.

    The export's settings are sorted by class: TRL's trainer config takes its own fields, ModelConfig the model's,
    and the script the rest. A setting none of them knows is a ConfigError: the export and the installed TRL
    disagree, and the run would not be the one the export prints. So is a field the export can only comment on
    (an adaptive KL target, one response per prompt, ...): the trial would run without it, and a KL schedule that
    leaves a beta of 0 (TRL then loads no reference model). The schedules themselves run as a callback
    (:mod:`tuner.trl_trial.schedule_callback`).
    """
    if trainer not in TRL_TRAINERS:
        raise ConfigError(f"trainer: {trainer!r} is not a TRL trainer (choose from {', '.join(TRL_TRAINERS)})")
    export = exported(trainer, config.to_dict())
    config_fields = trl_fields(TRL_TRAINERS[trainer][0])
    model_fields = trl_fields("ModelConfig")
    script_fields = trl_fields("ScriptArguments") | {"reward_model_name_or_path", "reward_funcs"}
    parts: dict[str, dict[str, Any]] = {"config": {}, "model": {}, "script": {}}
    for key, value, _ in export.settings:
        if key in model_fields:
            parts["model"][key] = value
        elif key in config_fields:
            parts["config"][key] = value
        elif key in script_fields:
            parts["script"][key] = value
        else:
            raise ConfigError(f"{key}: the {trainer} export sets it, but the installed TRL's "
                              f"{TRL_TRAINERS[trainer][0]}, ModelConfig and ScriptArguments have no such field")
    _refuse_what_trl_lacks(trainer, export)
    from tuner.trl_trial.schedule_callback import refuse_kl_without_reference  # transformers, as trl_fields' TRL

    refuse_kl_without_reference(config.kl_coef_schedule, float(parts["config"].get("beta", 0.0)), config.use_peft)
    parts["config"].update(TRIAL_OWNED)
    comments = tuple(line for _, line in export.comments) + tuple(f"# not exact: {line}"
                                                                  for line in export.differences)
    return TrialArguments(trainer, parts["config"], parts["model"], parts["script"], comments)
