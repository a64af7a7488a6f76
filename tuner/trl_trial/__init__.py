"""Trials that run TRL's own trainers: ``trainer: trl-grpo`` or ``trl-rloo`` in a study file.

The trial's config is a ppo-tune config, checked as every study's is, and the trial runs TRL's GRPOTrainer or
RLOOTrainer with exactly the arguments ``ppo-tune best --format trl-grpo`` prints for it (:mod:`.arguments`), on the
same model, prompts and rewards a ppo_core trial loads (:mod:`.run`). A transformers ``TrainerCallback``
(:mod:`.bridge`) turns TRL's logs into ppo-tune's metric names (:mod:`.metrics`), runs the held-out evaluation
with its KL to the reference (also when beta is 0, when TRL measures none), and passes every update to the same
reporter a ppo_core trial has, so storage, pruning and the KL guard are the tuner's own. Another
(:mod:`.schedule_callback`) puts a config's learning-rate and KL-coefficient schedules in force in TRL's trainer, for
a trial and for a user's own script alike.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tuner.trl_trial.arguments import TRL_TRAINERS, TrialArguments, trial_arguments

if TYPE_CHECKING:
    from tuner.trl_trial.schedule_callback import ScheduleCallback as ScheduleCallback

__all__ = ["TRL_TRAINERS", "ScheduleCallback", "TrialArguments", "trial_arguments"]


def __getattr__(name: str) -> Any:
    # Loaded on first use: it imports transformers, which a reader of a stored study's TRL names never needs.
    if name == "ScheduleCallback":
        return importlib.import_module("tuner.trl_trial.schedule_callback").ScheduleCallback
    raise AttributeError(f"module 'tuner.trl_trial' has no attribute {name!r}")
