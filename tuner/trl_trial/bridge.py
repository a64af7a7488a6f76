"""The transformers callback between TRL's trainer and ppo-tune's reporters: one PPO update per logging step.

The trial logs once per generation (``logging_steps`` = the optimizer steps of one update), so TRL's logged means are
one update's, as ppo_core's metrics are. At each of those the bridge maps the logs to ppo-tune's names, adds the
held-out evaluation where ``eval_steps`` says (ppo_core's own, on the policy TRL is training, against the reference),
records sample responses, and hands the update to ppo-tune's callbacks; a stop reason one of them returns ends
TRL's training loop at that step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from ppo_core.config.ppo_config import PPOConfig
from ppo_core.config.schedules import value_at
from ppo_core.metric_names import GOLD_SCORE
from ppo_core.run.callbacks import SampleGeneration
from ppo_core.run.callbacks import TrainerCallback as UpdateCallback
from ppo_core.run.distributed import ProcessGroup
from ppo_core.run.evaluation import evaluation_interval, is_evaluation_update, sample_interval
from tuner.trl_trial.metrics import ppo_tune_metrics

# The trainer's summary log after the last step (train_runtime, train_loss, ...) is not an update.
SUMMARY_KEY = "train_runtime"


class UpdateBridge(TrainerCallback):
    """Calls ``callbacks`` (ppo_core's interface: on_train_begin, on_update, on_samples, on_train_end) from TRL's
    trainer, once per PPO update of ``steps_per_update`` optimizer steps.

    ``evaluate(update)`` returns the held-out metrics, ``samples(update)`` the sample responses; both are the
    trial's (:mod:`tuner.trl_trial.run`); ``training_gold()`` the gold score of the update's training responses,
    where the task has a gold scorer and scores them, else None. ``beta`` is TRL's KL coefficient before
    kl_coef_schedule's first pair: each update reports the one in force as objective/kl_coef.

    Under ``accelerate launch`` every process runs the bridge (the evaluation and the training gold are collective),
    but as in ppo_core's trainer the callbacks and the sample recordings run on the main process alone, and a stop
    decided there stops every process at the same step."""

    def __init__(self, config: PPOConfig, callbacks: Sequence[UpdateCallback], num_updates: int,
                 steps_per_update: int, beta: float, evaluate: Callable[[int], dict[str, float]],
                 samples: Callable[[int], list[SampleGeneration]],
                 training_gold: Callable[[], float | None], group: ProcessGroup) -> None:
        self.config = config
        self.group = group
        self.callbacks = list(callbacks) if group.is_main else []
        self.num_updates = num_updates
        self.steps_per_update = steps_per_update
        self.beta = beta
        self.evaluate = evaluate
        self.samples = samples
        self.training_gold = training_gold
        self.eval_interval = evaluation_interval(config.eval_steps, num_updates)
        self.sample_every = sample_interval(num_updates, config.num_sample_generations)
        self.updates = 0
        self.stop_reason: str | None = None
        self.trained_by = ""  # "TRL 1.16.0 GRPOTrainer", once the trainer is built
        # Seconds the trial spends outside TRL's own loop: its held-out evaluations, its sample recordings, and
        # handing each update to ppo-tune's callbacks (storage, pruning, the KL guard).
        self.seconds = {"evaluation": 0.0, "samples": 0.0, "callbacks": 0.0}

    def _record_samples(self, update: int) -> None:
        started = time.perf_counter()
        recorded = self.samples(update)
        self.seconds["samples"] += time.perf_counter() - started
        started = time.perf_counter()
        for callback in self.callbacks:
            callback.on_samples(update, recorded)
        self.seconds["callbacks"] += time.perf_counter() - started

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       **kwargs: Any) -> None:
        for callback in self.callbacks:
            callback.on_train_begin(self.config, self.num_updates)
        if self.sample_every and self.group.is_main:
            self._record_samples(0)

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if not logs or SUMMARY_KEY in logs or state.global_step % self.steps_per_update:
            return
        update = state.global_step // self.steps_per_update
        metrics = ppo_tune_metrics(logs, update, update * self.config.batch_size,
                                   value_at(self.config.kl_coef_schedule, self.beta, update))
        gold = self.training_gold()
        if gold is not None:
            metrics[GOLD_SCORE] = gold
        if is_evaluation_update(update, self.num_updates, self.eval_interval):
            started = time.perf_counter()
            metrics.update(self.evaluate(update))
            self.seconds["evaluation"] += time.perf_counter() - started
        self.updates = update
        reason = None
        started = time.perf_counter()
        for callback in self.callbacks:
            reason = callback.on_update(update, metrics) or reason
        self.seconds["callbacks"] += time.perf_counter() - started
        reason = self.group.from_main(reason)
        if self.sample_every and self.group.is_main and \
                (update % self.sample_every == 0 or update == self.num_updates or reason):
            self._record_samples(update)
        if reason:
            self.stop_reason = reason
            control.should_training_stop = True

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kwargs: Any) -> None:
        for callback in self.callbacks:
            callback.on_train_end(self.updates, self.stop_reason)
