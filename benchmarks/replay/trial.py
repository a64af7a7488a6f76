"""One trial replayed from a table run: what the tuner's reporter would have done, update by update, without training.

At each update u of the run, in the order ``tuner.trial.reporter.TrialReporter.on_update`` takes them:

1. a non-finite training metric fails the trial (the tuner marks it FAIL: divergence, not a judgement);
2. the KL guard, when on, asks ``tuner.trial.kl_guard.blowup_reason(kl[1..u], planned_updates, guard)``, the tuner's own
   pure rule (the threshold, and the trend over the last ``window`` updates that would cross it before the run ends),
   and a reason stops the trial there (pruned);
3. on an evaluation update, the objective reduced over the evaluations so far (the quickstart's mean of the last 2
   held-out golds) is reported at step u, and the study's pruner may stop the trial there.

A trial costs the updates it ran: u for one stopped at u, the run's length for one that finished, and no more than
``limit`` (what is left of the budget: a trial the budget cuts short is ``cut``).

Example::

    outcome = replay_run(run, spec.objectives[0], spec.constraints, spec.kl_guard, trial, limit=budget - spent)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from benchmarks.replay.table import Run, history
from tuner.study.constraints import Constraint, constraint_values
from tuner.study.reduction import Reduction, reduce_history
from tuner.study.spec import KLGuard
from tuner.trial.kl_guard import blowup_reason

STATES = ("complete", "pruned", "guarded", "failed", "cut")


class Reporter(Protocol):
    """What a trial offers a run: ``optuna.Trial``'s report and should_prune."""

    def report(self, value: float, step: int) -> None: ...

    def should_prune(self) -> bool: ...


@dataclass(frozen=True)
class TrialOutcome:
    state: str
    """complete, pruned (by the study's pruner), guarded (by the KL guard), failed (diverged) or cut (budget)."""
    cost: int
    """Updates run."""
    value: float
    """The objective over the evaluations it ran (NaN if none)."""
    constraints: dict[str, float] = field(default_factory=dict)
    """Each constraint's value over what it ran, by Optuna's convention (feasible when <= 0); empty when failed or
    never reported, as the tuner leaves it unset."""
    reason: str | None = None

    @property
    def feasible(self) -> bool:
        return all(value <= 0 for value in self.constraints.values())


def guard_stop(kl: Sequence[float], planned_updates: int, guard: KLGuard) -> tuple[int, str] | None:
    """(u, reason) for the first update u at which ``blowup_reason(kl[:u], planned_updates, guard)`` stops a run;
    None when it never does."""
    for update in range(1, len(kl) + 1):
        reason = blowup_reason(kl[:update], planned_updates, guard)
        if reason is not None:
            return update, reason
    return None


def _non_finite(run: Run, update: int) -> str | None:
    for name, values in run.train.items():
        value = values[update - 1] if update <= len(values) else None
        if value is not None and not math.isfinite(value):
            return f"{name} is {value} at update {update}"
    return None


def _outcome(state: str, run: Run, cost: int, objective: Reduction, constraints: Sequence[Constraint],
             reason: str | None = None) -> TrialOutcome:
    """The trial's record after ``cost`` updates: its objective and constraint values over what it ran."""
    value = reduce_history(history(run, objective.metric, cost), objective)
    bounds: dict[str, float] = {}
    if state != "failed":
        for constraint in constraints:
            seen = history(run, constraint.metric, cost)
            if seen:
                bounds.update(constraint_values(constraint, reduce_history(seen, constraint)))
    return TrialOutcome(state, cost, value, bounds, reason)


def replay_run(run: Run, objective: Reduction, constraints: Sequence[Constraint], guard: KLGuard | None,
               reporter: Reporter | None, limit: int) -> TrialOutcome:
    """Replay ``run`` as a trial (see the module docstring); ``guard`` None replays with no KL guard, ``reporter``
    None with no pruner (a race's rerun)."""
    kl = history(run, guard.metric, run.updates) if guard is not None else []
    evaluated = set(run.eval_updates)
    for update in range(1, run.updates + 1):
        if update > limit:
            return _outcome("cut", run, limit, objective, constraints, "the budget ran out")
        non_finite = _non_finite(run, update)
        if non_finite is not None:
            return _outcome("failed", run, update, objective, constraints, non_finite)
        if guard is not None:
            reason = blowup_reason(kl[:update], run.planned_updates, guard)
            if reason is not None:
                return _outcome("guarded", run, update, objective, constraints, reason)
        if reporter is not None and update in evaluated:
            value = reduce_history(history(run, objective.metric, update), objective)
            if math.isfinite(value):
                reporter.report(value, update)
                if reporter.should_prune():
                    return _outcome("pruned", run, update, objective, constraints,
                                    f"pruner: {value:.4f} at update {update}")
    if run.failed:
        return _outcome("failed", run, run.updates, objective, constraints, "the run diverged")
    return _outcome("complete", run, run.updates, objective, constraints)
