"""A ppo-tune config's ``learning_rate_schedule`` and ``kl_coef_schedule`` put in force inside TRL's GRPOTrainer and
RLOOTrainer, as a transformers ``TrainerCallback``: what a TRL trial installs, and what ``best --format trl-grpo`` /
``trl-rloo`` tell a user to add to their own trainer.

A PPO update is one generation: TRL samples once every ``steps_per_generation x num_iterations`` micro-steps and
makes an optimizer step every ``gradient_accumulation_steps`` of them, so an update is S optimizer steps (the
export's num_mini_batches x num_ppo_epochs). At the start of each optimizer step, before the micro-step that may
generate, the callback puts the values of the step's update in force: the learning rate (the peak, under the LR
scheduler's warmup/decay multiplier) and ``trainer.beta``, which both trainers read at every generation and loss
(GRPO: beta x KL in the loss; RLOO: beta x KL in the reward).

Example::

    trainer = GRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(learning_rate=3e-5, beta=0.04, ...))
    trainer.add_callback(ScheduleCallback(trainer, learning_rate_schedule=[[13, 2e-5]], kl_coef_schedule=[[13, 0.02]]))
    trainer.train()
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from ppo_core.config.checks import ConfigError
from ppo_core.config.schedules import Schedule, check_schedule, value_at
from ppo_core.run.scheduled_values import set_peak_learning_rate


def update_of_step(global_step: int, steps_per_update: int) -> int:
    """The PPO update (from 1) that optimizer step ``global_step + 1`` belongs to, when each update is
    ``steps_per_update`` = S optimizer steps and ``global_step`` of them are done:

        u = floor(g / S) + 1
    """
    return global_step // steps_per_update + 1


def optimizer_steps_per_generation(args: Any) -> int:
    """S = steps_per_generation x num_iterations / gradient_accumulation_steps of a GRPOConfig or RLOOConfig: the
    optimizer steps between two generations. ConfigError where that is not a whole number (a generation's update
    would then not start at an optimizer step)."""
    micro_steps = args.steps_per_generation * args.num_iterations
    if micro_steps % args.gradient_accumulation_steps:
        raise ConfigError(f"steps_per_generation x num_iterations ({micro_steps}) is not a multiple of "
                          f"gradient_accumulation_steps ({args.gradient_accumulation_steps}): a PPO update would not "
                          "be a whole number of optimizer steps, and a schedule counts updates")
    return micro_steps // args.gradient_accumulation_steps


def refuse_kl_without_reference(kl_coef_schedule: Schedule | None, beta: float, has_adapter: bool) -> None:
    """ConfigError where ``kl_coef_schedule`` raises the KL coefficient above 0 from a ``beta`` of 0 without a LoRA
    adapter: TRL loads no reference model at beta 0 (under LoRA the reference is the policy with its adapter off)."""
    if beta == 0 and not has_adapter and any(value > 0 for _, value in kl_coef_schedule or ()):
        raise ConfigError("kl_coef_schedule: TRL's trainer starts at beta 0 and so loads no reference model for a "
                          "later KL coefficient above 0; start from a beta above 0, or train a LoRA adapter")


class ScheduleCallback(TrainerCallback):
    """Puts ``learning_rate_schedule`` and ``kl_coef_schedule`` (ppo-tune's pairs ``[update, value]``) in force in
    ``trainer`` (TRL's GRPOTrainer or RLOOTrainer) at each optimizer step. Before a schedule's first pair, the
    trainer's own values are in force: ``args.learning_rate`` and the beta it was built with."""

    def __init__(self, trainer: Any, learning_rate_schedule: Schedule | None = None,
                 kl_coef_schedule: Schedule | None = None) -> None:
        check_schedule("learning_rate_schedule", learning_rate_schedule, zero_allowed=False)
        check_schedule("kl_coef_schedule", kl_coef_schedule, zero_allowed=True)
        self.trainer = trainer  # a TrainerCallback is handed the optimizer and scheduler, never the trainer's beta
        self.learning_rate_schedule = learning_rate_schedule
        self.kl_coef_schedule = kl_coef_schedule
        self.learning_rate = float(trainer.args.learning_rate)
        self.beta = float(trainer.beta)
        self.steps_per_update = optimizer_steps_per_generation(trainer.args)
        refuse_kl_without_reference(kl_coef_schedule, self.beta, hasattr(trainer.model, "peft_config"))

    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                      **kwargs: Any) -> None:
        update = update_of_step(state.global_step, self.steps_per_update)
        if self.learning_rate_schedule is not None:
            scheduler = kwargs.get("lr_scheduler") or self.trainer.lr_scheduler
            scheduler = getattr(scheduler, "scheduler", scheduler)  # accelerate's wrapper, where it wraps one
            set_peak_learning_rate(scheduler, value_at(self.learning_rate_schedule, self.learning_rate, update))
        if self.kl_coef_schedule is not None:
            self.trainer.beta = value_at(self.kl_coef_schedule, self.beta, update)


__all__ = ["ScheduleCallback", "optimizer_steps_per_generation", "refuse_kl_without_reference", "update_of_step"]
