"""The trial's side of one PPO run: store every update and sample, report to Optuna, judge each update.

A :class:`TrialReporter` runs in the trial's own process (``tuner.trial_process``), as a callback of the trainer.
It stops a run by returning the reason from ``on_update``, never by raising: under accelerate launch only the main
process calls it, and the trainer stops every process on a returned reason, where an exception would leave the
others waiting.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import optuna

from ppo_core.callbacks import SampleGeneration, TrainerCallback
from ppo_core.errors import NonFiniteError
from ppo_core.metric_names import GUARDED_METRICS
from ppo_core.metrics import first_non_finite
from tuner.attrs import BUDGET_ATTR, KL_HISTORY_ATTR, NON_FINITE_ATTR, PRUNE_REASON_ATTR, PRUNED_AT_ATTR
from tuner.kl_guard import KLGuardPruner, blowup_reason
from tuner.study_config import Objective, StudySpec
from tuner.trial_records import TrialStore


def reduce_history(history: Sequence[float], objective: Objective) -> float:
    """The objective's value from a metric's per-update history (e.g. the mean of the last k updates)."""
    if not history:
        return math.nan
    if objective.reduce == "last":
        return history[-1]
    if objective.reduce == "max":
        return max(history)
    if objective.reduce == "min":
        return min(history)
    window = history if objective.reduce == "mean" else history[-objective.k:]
    return sum(window) / len(window)


class TrialReporter(TrainerCallback):
    """Stores every update and sample, reports to Optuna and asks the trainer to stop when the run must end;
    after ``train()`` returns, :meth:`objective_values` says how the trial went.

    Example::

        reporter = TrialReporter(trial, spec, make_pruner(spec), TrialStore(engine, spec.name, trial_id, number))
        PPOTrainer(config, [reporter]).train()
        values = reporter.objective_values()  # or optuna.TrialPruned, or the error that failed the run
    """

    def __init__(self, trial: optuna.Trial, spec: StudySpec, pruner: KLGuardPruner, store: TrialStore) -> None:
        self.trial = trial
        self.spec = spec
        self.pruner = pruner
        self.store = store
        self.histories: dict[str, list[float]] = {objective.metric: [] for objective in spec.objectives}
        self.kl_history: list[float] = []
        self.budget_updates = 0
        self.prune_reason: str | None = None
        self.error: Exception | None = None  # what ended the run as a failure: a missing metric, a non-finite one

    def on_train_begin(self, config: Any, num_updates: int) -> None:
        self.budget_updates = num_updates
        self.trial.set_user_attr(BUDGET_ATTR, num_updates)

    def on_samples(self, update: int, samples: list[SampleGeneration]) -> None:
        self.store.write_samples(samples)

    def on_update(self, update: int, metrics: dict[str, float]) -> str | None:
        self.store.write_metrics(update, metrics)
        for objective in self.spec.objectives:
            if objective.metric not in metrics:
                self.error = KeyError(f"objective metric {objective.metric!r} is not reported by this run")
                return str(self.error)
            self.histories[objective.metric].append(metrics[objective.metric])
        self.kl_history.append(metrics.get(self.spec.kl_guard.metric, 0.0))
        self.trial.set_user_attr(KL_HISTORY_ATTR, self.kl_history)
        # The root cause first (score, KL, losses), then whatever else went non-finite.
        non_finite = first_non_finite(metrics, GUARDED_METRICS) or first_non_finite(metrics, tuple(metrics))
        if non_finite is not None:
            # Numerical divergence is a failure, not a judgement on the hyperparameters' promise: FAIL.
            message = f"{non_finite} is {metrics[non_finite]} at update {update}"
            self.trial.set_user_attr(NON_FINITE_ATTR, message)
            self.error = NonFiniteError(message)
            return message
        reason = blowup_reason(self.kl_history, self.budget_updates, self.pruner.guard)
        if reason is None and not self.spec.multi_objective:
            first = self.spec.objectives[0]
            value = reduce_history(self.histories[first.metric], first)
            if math.isfinite(value):
                self.trial.report(value, update)
                if self.trial.should_prune():
                    reason = f"{self.spec.pruner['name']} pruner: {first.label} {value:.4f} at update {update}"
        if reason is not None:
            self.trial.set_user_attr(PRUNE_REASON_ATTR, reason)
            self.trial.set_user_attr(PRUNED_AT_ATTR, update)
            self.prune_reason = reason
        return reason

    def objective_values(self) -> list[float]:
        """The trial's objective values once the run is over; raises the error that failed it, or
        ``optuna.TrialPruned`` with the reason it was stopped."""
        if self.error is not None:
            raise self.error
        if self.prune_reason is not None:
            raise optuna.TrialPruned(self.prune_reason)
        return [reduce_history(self.histories[o.metric], o) for o in self.spec.objectives]
