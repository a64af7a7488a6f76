"""Constraints (a KL budget): their values by Optuna's convention, feasibility in the best trials, and the trial
reporter with sparse metrics (held-out evaluation reports only on some updates), on real Optuna trials."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import optuna
import pytest
from helpers.studies import write_study
from optuna.trial import FrozenTrial, TrialState, create_trial

from tuner.store.attrs import PRUNE_REASON_ATTR
from tuner.store.database import create_engine, open_storage
from tuner.store.records import TrialStore, create_tables
from tuner.study.constraints import Constraint, constraint_values, feasible
from tuner.study.study_file import Objective, StudySpec, load_study_spec
from tuner.study.winner import best_trials
from tuner.trial.factory import make_pruner
from tuner.trial.reporter import MissingMetricError, TrialReporter, reduce_history

KL_BUDGET = Constraint("objective/kl", "max", k=5, max=8.0)


@pytest.mark.parametrize(("constraint", "reduced", "values"), [
    (KL_BUDGET, 9.5, {"objective/kl (max) <= 8": 1.5}),
    (KL_BUDGET, 8.0, {"objective/kl (max) <= 8": 0.0}),  # on the bound: feasible
    (Constraint("eval/score", "mean_last_k", k=3, min=0.5), 0.2, {"eval/score (mean_last_k 3) >= 0.5": 0.3}),
    (Constraint("objective/kl", "last", k=5, max=8.0, min=1.0), 0.5,
     {"objective/kl (last) <= 8": -7.5, "objective/kl (last) >= 1": 0.5}),
])
def test_constraint_values_are_feasible_at_or_below_zero(
    constraint: Constraint, reduced: float, values: dict[str, float]
) -> None:
    assert constraint_values(constraint, reduced) == values


def trial(value: float, constraints: dict[str, float] | None = None, values: list[float] | None = None) -> FrozenTrial:
    return create_trial(state=TrialState.COMPLETE, value=None if values else value, values=values,
                        constraints=constraints)


def test_feasible() -> None:
    assert feasible(trial(1.0, {"a": 0.0, "b": -1.0}))
    assert not feasible(trial(1.0, {"a": 0.0, "b": 0.1}))
    assert feasible(trial(1.0))  # no constraints set: feasible, as Optuna counts it


def test_best_trials_skip_infeasible_trials(tmp_path: Path) -> None:
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'c.db'}", direction="maximize")
    assert best_trials(study) == []
    study.add_trial(trial(5.0, {"kl": 1.5}))  # the best value, over the KL budget
    assert best_trials(study) == []  # study.best_trial raises ValueError here
    study.add_trial(trial(2.0, {"kl": -0.5}))
    study.add_trial(trial(1.0, {"kl": -2.0}))
    assert [t.value for t in best_trials(study)] == [2.0]

    front = optuna.create_study(storage=f"sqlite:///{tmp_path / 'c.db'}", study_name="front",
                                directions=["maximize", "minimize"])
    front.add_trial(trial(0, {"kl": 1.0}, values=[9.0, 0.0]))  # dominates every other trial, but infeasible
    front.add_trial(trial(0, {"kl": 0.0}, values=[2.0, 1.0]))
    front.add_trial(trial(0, {"kl": -1.0}, values=[1.0, 0.5]))
    assert [t.values for t in best_trials(front)] == [[2.0, 1.0], [1.0, 0.5]]


def reporter_for(
    tmp_path: Path, lm_dir: Path, prompts: Path, objectives: list[Objective] | None = None,
    constraints: list[Constraint] | None = None, **study: Any,
) -> tuple[TrialReporter, optuna.Study]:
    """A reporter on a real trial of a real SQLite study, fed by hand instead of by the trainer. The objectives and
    constraints are set on the parsed spec: they name evaluation metrics that only runs with held-out evaluation
    report, and these runs are the hand-made updates below."""
    tmp_path.mkdir(exist_ok=True)
    spec = load_study_spec(write_study(tmp_path, lm_dir, prompts, **study))
    spec = dataclasses.replace(spec, objectives=objectives or spec.objectives, constraints=constraints or [])
    storage = open_storage(spec.storage)
    create_tables(create_engine(spec.storage))
    optuna_study = optuna.create_study(study_name=spec.name, storage=storage, directions=spec.directions,
                                       pruner=make_pruner(spec))
    trial = optuna_study.ask()
    store = TrialStore(create_engine(spec.storage), spec.name, trial._trial_id, trial.number)
    reporter = TrialReporter(trial, spec, make_pruner(spec), store)
    reporter.on_train_begin(None, num_updates=6)
    return reporter, optuna_study


def update_metrics(update: int, evaluated: bool) -> dict[str, float]:
    """An update's metrics: the evaluation's only every third update, as ``eval_steps: 3`` reports them."""
    metrics = {"objective/kl": 0.1 * update, "objective/scores": 1.0, "loss/policy_avg": 0.0, "loss/value_avg": 0.1}
    if evaluated:
        metrics.update({"eval/score": 0.5 + 0.1 * update, "eval/kl": 0.2 * update})
    return metrics


EVAL_OBJECTIVE = [Objective("eval/score", "maximize", "mean_last_k", k=2)]


def test_sparse_objective_reports_on_evaluation_updates_only(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path
) -> None:
    reporter, study = reporter_for(tmp_path, tiny_lm_dir, prompts_file, objectives=EVAL_OBJECTIVE,
                                   constraints=[Constraint("eval/kl", "last", k=5, max=1.0)])
    for update in range(1, 7):
        # The reporter must not fail the run at update 1, where eval/score is missing.
        assert reporter.on_update(update, update_metrics(update, evaluated=update % 3 == 0)) is None
    assert reporter.histories == {"eval/score": pytest.approx([0.8, 1.1]), "eval/kl": pytest.approx([0.6, 1.2])}
    reporter.set_constraints()
    assert reporter.objective_values() == [pytest.approx(0.95)]  # the mean of the last 2 evaluations
    (frozen,) = study.get_trials()
    # Reported to Optuna on the updates that evaluated: the reduced history so far.
    assert frozen.intermediate_values == {3: pytest.approx(0.8), 6: pytest.approx(0.95)}
    assert frozen.constraints == {"eval/kl (last) <= 1": pytest.approx(0.2)}


def test_a_metric_never_reported_fails_a_completed_run(tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path) -> None:
    reporter, _ = reporter_for(tmp_path, tiny_lm_dir, prompts_file, objectives=EVAL_OBJECTIVE)
    for update in range(1, 4):
        reporter.on_update(update, update_metrics(update, evaluated=False))
    with pytest.raises(MissingMetricError, match="objective metric 'eval/score' was never reported by this run"):
        reporter.objective_values()

    reporter, study = reporter_for(tmp_path / "c", tiny_lm_dir, prompts_file,
                                   constraints=[Constraint("eval/kl", "max", k=5, max=1.0)])
    reporter.on_update(1, update_metrics(1, evaluated=False))
    with pytest.raises(MissingMetricError, match="constraint metric 'eval/kl' was never reported by this run"):
        reporter.set_constraints()
    assert study.get_trials()[0].constraints == {}


def test_a_pruned_run_sets_what_it_measured_and_says_what_it_did_not(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path
) -> None:
    reporter, study = reporter_for(
        tmp_path, tiny_lm_dir, prompts_file, kl_guard={"threshold": 0.15, "predict": False},
        constraints=[Constraint("objective/kl", "max", k=5, max=0.1), Constraint("eval/kl", "max", k=5, max=1.0)])
    assert reporter.on_update(1, update_metrics(1, evaluated=False)) is None
    assert "passed the threshold" in str(reporter.on_update(2, update_metrics(2, evaluated=False)))
    reporter.set_constraints()
    with pytest.raises(optuna.TrialPruned, match="no value of 'eval/kl' before then, so its constraint is unset"):
        reporter.objective_values()
    (frozen,) = study.get_trials()
    assert frozen.constraints == {"objective/kl (max) <= 0.1": pytest.approx(0.1)}  # KL 0.2 at update 2
    assert frozen.user_attrs[PRUNE_REASON_ATTR] == reporter.prune_reason


def test_reduce_history_serves_objectives_and_constraints_alike() -> None:
    history = [1.0, 4.0, 2.0, 3.0]
    for reduce, value in (("last", 3.0), ("mean", 2.5), ("max", 4.0), ("min", 1.0), ("mean_last_k", 2.5)):
        assert reduce_history(history, Objective("m", reduce=reduce, k=2)) == value
        assert reduce_history(history, Constraint("m", reduce, k=2, max=0.0)) == value
    assert math.isnan(reduce_history([], KL_BUDGET))


def test_spec_without_constraints_has_none(tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path) -> None:
    spec: StudySpec = load_study_spec(write_study(tmp_path, tiny_lm_dir, prompts_file))
    assert spec.constraints == [] and spec.enqueue == []


def test_a_kl_guard_on_an_evaluation_metric_reads_only_the_updates_that_report_it(
        tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path) -> None:
    # Regression: the guard's history took 0.0 for every update without the metric, so the level of eval/kl
    # (reported every third update) was its mean with the zeros between: 0.6 at update 3 held as 0.3 (window 2).
    reporter, _ = reporter_for(tmp_path, tiny_lm_dir, prompts_file, objectives=EVAL_OBJECTIVE,
                               kl_guard={"metric": "eval/kl", "threshold": 0.5, "window": 2},
                               base={"eval_steps": 3})
    assert [reporter.on_update(update, update_metrics(update, update == 3)) for update in (1, 2)] == [None, None]
    reason = reporter.on_update(3, update_metrics(3, evaluated=True))
    assert reporter.kl_history == [pytest.approx(0.6)]
    assert reason == "eval/kl 0.60 (mean of the last 1 updates) passed the threshold 0.5 at update 3"
