"""One Optuna trial = one short PPO run: suggest, train, report each update, store everything, judge."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import optuna
import sqlalchemy

from ppo_core import NonFiniteError, PPOTrainer, SampleGeneration, TrainerCallback
from ppo_core.config_io import build_config
from ppo_core.errors import first_line
from ppo_core.metric_names import GUARDED_METRICS
from ppo_core.metrics import first_non_finite
from tuner.attrs import (
    BUDGET_ATTR,
    CONFIG_ATTR,
    FAIL_REASON_ATTR,
    KL_HISTORY_ATTR,
    NON_FINITE_ATTR,
    PRUNE_REASON_ATTR,
    PRUNED_AT_ATTR,
    RETRY_OF_ATTR,
)
from tuner.kl_guard import KLGuardPruner, blowup_reason
from tuner.search_space import suggest_params
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
    """Stores every update and sample, reports to Optuna and stops the run when the pruner says so."""

    def __init__(self, trial: optuna.Trial, spec: StudySpec, pruner: KLGuardPruner, store: TrialStore) -> None:
        self.trial = trial
        self.spec = spec
        self.pruner = pruner
        self.store = store
        self.histories: dict[str, list[float]] = {objective.metric: [] for objective in spec.objectives}
        self.kl_history: list[float] = []
        self.budget_updates = 0

    def on_train_begin(self, config: Any, num_updates: int) -> None:
        self.budget_updates = num_updates
        self.trial.set_user_attr(BUDGET_ATTR, num_updates)

    def on_samples(self, update: int, samples: list[SampleGeneration]) -> None:
        self.store.write_samples(samples)

    def on_update(self, update: int, metrics: dict[str, float]) -> str | None:
        self.store.write_metrics(update, metrics)
        for objective in self.spec.objectives:
            if objective.metric not in metrics:
                raise KeyError(f"objective metric {objective.metric!r} is not reported by this run")
            self.histories[objective.metric].append(metrics[objective.metric])
        self.kl_history.append(metrics.get(self.spec.kl_guard.metric, 0.0))
        self.trial.set_user_attr(KL_HISTORY_ATTR, self.kl_history)
        # The root cause first (score, KL, losses), then whatever else went non-finite.
        non_finite = first_non_finite(metrics, GUARDED_METRICS) or first_non_finite(metrics, tuple(metrics))
        if non_finite is not None:
            # Numerical divergence is a failure, not a judgement on the hyperparameters' promise: FAIL.
            message = f"{non_finite} is {metrics[non_finite]} at update {update}"
            self.trial.set_user_attr(NON_FINITE_ATTR, message)
            raise NonFiniteError(message)
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
            raise optuna.TrialPruned(reason)
        return None


def make_objective(
    spec: StudySpec, pruner: KLGuardPruner, engine: sqlalchemy.Engine
) -> Callable[[optuna.Trial], float | list[float]]:
    """The function ``study.optimize`` calls: it trains one PPO run and returns the objective value(s)."""

    def objective(trial: optuna.Trial) -> float | list[float]:
        try:
            values = {**spec.base, **suggest_params(trial, spec.search_space, spec.base)}
            config = build_config(values)
            trial.set_user_attr(CONFIG_ATTR, config.to_dict())
            store = TrialStore(engine, spec.name, trial._trial_id, trial.number)
            reporter = TrialReporter(trial, spec, pruner, store)
            PPOTrainer(config, [reporter]).train()
        except optuna.TrialPruned:
            raise
        except KeyboardInterrupt:
            trial.set_user_attr(FAIL_REASON_ATTR, "interrupted (Ctrl-C); queued again for the resumed study")
            trial.study.enqueue_trial(trial.params, user_attrs={RETRY_OF_ATTR: trial.number}, skip_if_exists=False)
            raise
        except Exception as error:
            trial.set_user_attr(FAIL_REASON_ATTR, f"{type(error).__name__}: {first_line(error)}"[:1000])
            raise
        results = [reduce_history(reporter.histories[o.metric], o) for o in spec.objectives]
        return results[0] if len(results) == 1 else results

    return objective
