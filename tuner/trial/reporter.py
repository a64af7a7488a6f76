"""The trial's side of one PPO run: store every update and sample, report to Optuna, judge each update.

A :class:`TrialReporter` runs in the trial's own process (``tuner.trial.process``), as a callback of the trainer.
It stops a run by returning the reason from ``on_update``, never by raising: under accelerate launch only the main
process calls it, and the trainer stops every process on a returned reason, where an exception would leave the
others waiting.

Metrics may be sparse: held-out evaluation metrics (``eval/...``) come only on evaluation updates. An objective's or a
constraint's history holds the updates that reported its metric, and the trial reports to Optuna (and asks its pruner)
on the updates that report the first objective's.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import optuna

from ppo_core.errors import NonFiniteError
from ppo_core.metric_names import GUARDED_METRICS
from ppo_core.run.callbacks import SampleGeneration, TrainerCallback
from ppo_core.run.rollout_metrics import first_non_finite
from tuner.store.attrs import BUDGET_ATTR, KL_HISTORY_ATTR, NON_FINITE_ATTR, PRUNE_REASON_ATTR, PRUNED_AT_ATTR
from tuner.store.records import TrialStore
from tuner.study.constraints import Constraint, constraint_values
from tuner.study.reduction import reduce_history
from tuner.study.spec import StudySpec
from tuner.trial.kl_guard import KLGuardPruner, blowup_reason


def guard_crossed(bounds: Sequence[Constraint], metrics: Mapping[str, float], update: int) -> str | None:
    """The prune reason of the first hacking-guard bound this update's metrics cross, None when none does (or the
    update reports none of their metrics)."""
    for bound in bounds:
        value = metrics.get(bound.metric)
        if value is None:
            continue
        if bound.max is not None and value > bound.max:
            return f"hacking guard: {bound.metric} {value:.4g} above {bound.max:g} at update {update}"
        if bound.min is not None and value < bound.min:
            return f"hacking guard: {bound.metric} {value:.4g} below {bound.min:g} at update {update}"
    return None


class MissingMetricError(LookupError):
    """A run ended without ever reporting a metric that an objective or a constraint names."""


class TrialReporter(TrainerCallback):
    """Stores every update and sample, reports to Optuna and asks the trainer to stop when the run must end;
    after ``train()`` returns, :meth:`objective_values` says how the trial went.

    Example::

        reporter = TrialReporter(trial, spec, make_pruner(spec), TrialStore(engine, spec.name, trial_id, number))
        PPOTrainer(config, [reporter]).train()
        reporter.set_constraints()  # completed or pruned alike
        values = reporter.objective_values()  # or optuna.TrialPruned, or the error that failed the run
    """

    def __init__(self, trial: optuna.Trial, spec: StudySpec, pruner: KLGuardPruner, store: TrialStore) -> None:
        self.trial = trial
        self.spec = spec
        self.pruner = pruner
        self.store = store
        tracked = [objective.metric for objective in spec.objectives] + [c.metric for c in spec.constraints]
        self.histories: dict[str, list[float]] = {metric: [] for metric in tracked}
        self.updates = 0  # updates seen; none on the processes whose callbacks the trainer does not call
        self.kl_history: list[float] = []
        self.budget_updates = 0
        self.prune_reason: str | None = None
        self.error: Exception | None = None  # what ended the run as a failure: a missing metric, a non-finite one

    def on_train_begin(self, config: Any, num_updates: int) -> None:
        self.budget_updates = num_updates
        self.trial.set_user_attr(BUDGET_ATTR, num_updates)

    def on_samples(self, update: int, samples: list[SampleGeneration]) -> None:
        self.store.write_samples(samples)

    def restore(self, rows: Sequence[tuple[int, dict[str, float]]]) -> None:
        """Take up the state of the trial this one continues from its checkpoint, whose stored updates up to the
        checkpoint's are ``rows`` (``TrialStore.copy_from``): the histories, the KL history and the update count, and
        the intermediate values reported again, so that the pruner judges the later updates as it would have judged
        them in one run. Nothing is judged again: the trial ran on past these updates."""
        for update, metrics in rows:
            self._record(metrics)
            self._report(update, metrics)
        if self.kl_history:
            self.trial.set_user_attr(KL_HISTORY_ATTR, self.kl_history)

    def _record(self, metrics: dict[str, float]) -> None:
        self.updates += 1
        for metric, history in self.histories.items():
            if metric in metrics:
                history.append(metrics[metric])
        if self.pruner.guard.metric in metrics:  # a metric of the evaluations (eval/kl) comes on evaluation updates
            self.kl_history.append(metrics[self.pruner.guard.metric])

    def _report(self, update: int, metrics: dict[str, float]) -> float | None:
        """Report the first objective's value so far to Optuna, on the updates that report its metric; the value."""
        first = self.spec.objectives[0]
        if self.spec.multi_objective or first.metric not in metrics:
            return None
        value = reduce_history(self.histories[first.metric], first)
        if not math.isfinite(value):
            return None
        self.trial.report(value, update)
        return value

    def on_update(self, update: int, metrics: dict[str, float]) -> str | None:
        self.store.write_metrics(update, metrics)
        self._record(metrics)
        guard = self.pruner.guard
        if guard.metric in metrics:
            self.trial.set_user_attr(KL_HISTORY_ATTR, self.kl_history)
        # The root cause first (score, KL, losses), then whatever else went non-finite.
        non_finite = first_non_finite(metrics, GUARDED_METRICS) or first_non_finite(metrics, tuple(metrics))
        if non_finite is not None:
            # Numerical divergence is a failure, not a judgement on the hyperparameters' promise: FAIL.
            message = f"{non_finite} is {metrics[non_finite]} at update {update}"
            self.trial.set_user_attr(NON_FINITE_ATTR, message)
            self.error = NonFiniteError(message)
            return message
        reason = None
        if guard.metric in metrics:
            # The trend's forecast counts one value per update: on a sparser metric only the level is held.
            every_update = len(self.kl_history) == self.updates
            reason = blowup_reason(self.kl_history, self.budget_updates,
                                   guard if every_update else dataclasses.replace(guard, predict=False), update)
        if reason is None:
            reason = guard_crossed(self.spec.hacking_guard, metrics, update)
        if reason is None and (value := self._report(update, metrics)) is not None and self.trial.should_prune():
            label = self.spec.objectives[0].label
            reason = f"{self.spec.pruner['name']} pruner: {label} {value:.4f} at update {update}"
        if reason is not None:
            self.trial.set_user_attr(PRUNE_REASON_ATTR, reason)
            self.trial.set_user_attr(PRUNED_AT_ATTR, update)
            self.prune_reason = reason
        return reason

    def set_constraints(self) -> None:
        """Once the run is over, set each constraint's value on the trial (``trial.set_constraint``), completed or
        pruned alike, so that Optuna's samplers learn where the feasible region is and ``study.best_trial`` skips
        infeasible trials. A failed run sets none.

        A metric that no update reported: in a completed run that is a mistake (a misspelt metric, or evaluation
        never on), and the trial fails with :class:`MissingMetricError`, as for an objective, rather than count as
        infeasible in every trial alike; a pruned run may just have stopped before the metric's first report, and
        its constraint is left unset (unknown is not infeasible; Optuna then counts the trial as it counts any
        pruned one), as its prune reason says.
        """
        if self.error is not None or not self.updates:
            return
        unreported = list(dict.fromkeys(c.metric for c in self.spec.constraints if not self.histories[c.metric]))
        names = ", ".join(repr(metric) for metric in unreported)
        if unreported and self.prune_reason is None:
            self.error = MissingMetricError(f"constraint metric {names} was never reported by this run")
            raise self.error
        for constraint in self.spec.constraints:
            history = self.histories[constraint.metric]
            if history:
                for key, value in constraint_values(constraint, reduce_history(history, constraint)).items():
                    self.trial.set_constraint(key, value)
        if unreported:
            self.prune_reason = f"{self.prune_reason}; no value of {names} before then, so its constraint is unset"
            self.trial.set_user_attr(PRUNE_REASON_ATTR, self.prune_reason)

    def objective_values(self) -> list[float]:
        """The trial's objective values once the run is over; raises the error that failed it,
        ``optuna.TrialPruned`` with the reason it was stopped, or :class:`MissingMetricError` for an objective
        metric that no update reported."""
        if self.error is not None:
            raise self.error
        if self.prune_reason is not None:
            raise optuna.TrialPruned(self.prune_reason)
        for objective in self.spec.objectives:
            # A process that saw no update (under accelerate launch, all but the main one) has nothing to judge.
            if self.updates and not self.histories[objective.metric]:
                raise MissingMetricError(f"objective metric {objective.metric!r} was never reported by this run")
        return [reduce_history(self.histories[o.metric], o) for o in self.spec.objectives]
