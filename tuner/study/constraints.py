"""Constraints: bounds a trial's reduced metrics must keep, such as a KL budget, set on the trial for Optuna.

A study file's ``constraints`` list names them::

    constraints:
      - {metric: objective/kl, reduce: max, max: 8.0}   # the run's KL never above 8 nats

Optuna 5 reads ``trial.constraints`` itself: its TPE, NSGA-II and GP samplers model feasibility, and
``study.best_trial`` / ``study.best_trials`` choose among feasible trials only. By Optuna's convention a constraint's
value is feasible when it is <= 0, so each bound becomes one value (:func:`constraint_values`).

Example::

    budget = Constraint("objective/kl", "max", k=5, max=8.0)
    constraint_values(budget, 9.5)  # {"objective/kl (max) <= 8": 1.5}: 1.5 nats over, infeasible
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from optuna.trial import FrozenTrial

from ppo_core.metric_names import EVAL_KL
from tuner.study.reduction import reduction_label


@dataclass(frozen=True)
class Constraint:
    """One bound (or a pair) on a metric's history reduced to one number, as an objective's is."""

    metric: str
    """The metric, as the trainer names it (e.g. ``objective/kl``, or ``eval/kl`` on evaluation updates only)."""
    reduce: str
    """How the metric's history becomes one number: last, mean, max, min or mean_last_k (see ``reduce_history``)."""
    k: int
    """The window of ``mean_last_k``."""
    max: float | None = None
    """Feasible when the reduced value is at most this."""
    min: float | None = None
    """Feasible when the reduced value is at least this."""

    @property
    def label(self) -> str:
        return reduction_label(self)

    def bounds(self) -> list[tuple[str, float, bool]]:
        """Each bound as a study file writes it, its limit and whether it is an upper one:
        ``[("objective/kl (max) <= 8", 8.0, True)]``; a pair of bounds gives two."""
        return [(f"{self.label} {sign} {limit:g}", limit, upper)
                for sign, limit, upper in (("<=", self.max, True), (">=", self.min, False)) if limit is not None]


def constraint_values(constraint: Constraint, reduced: float) -> dict[str, float]:
    """The value of each bound for a reduced metric r, by Optuna's convention (feasible when <= 0):

    - upper bound ``max``: ``r - max``
    - lower bound ``min``: ``min - r``

    keyed by the bound as written (``"objective/kl (max) <= 8"``), the name ``trial.set_constraint`` stores it under.
    """
    return {text: reduced - limit if upper else limit - reduced for text, limit, upper in constraint.bounds()}


def feasible(trial: FrozenTrial) -> bool:
    """Whether every constraint set on the trial holds (value <= 0); a trial with none set is feasible, as Optuna
    counts it."""
    return all(value <= 0 for value in trial.constraints.values())


def upper_limit(constraints: Sequence[Constraint], metric: str = EVAL_KL) -> float | None:
    """The tightest ``metric <= max`` among ``constraints``, whatever the reduction (on held-out KL: the study's KL
    budget); None when none bounds it."""
    bounds = [c.max for c in constraints if c.metric == metric and c.max is not None]
    return min(bounds) if bounds else None
