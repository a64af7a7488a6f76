"""Optuna's views as the dashboard shows them (dashboard.optuna_views): the objective named on their axes, states in
the dashboard's colours."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from dashboard.frontier_charts import STATE_COLORS as FRONTIER_STATES
from dashboard.optuna_views import figure


def test_the_timeline_colours_states_as_every_other_page() -> None:
    study = optuna.create_study()
    for state in ("COMPLETE", "PRUNED", "FAIL"):
        study.add_trial(create_trial(state=TrialState[state], value=1.0 if state == "COMPLETE" else None,
                                     params={"x": 0.1}, distributions={"x": FloatDistribution(0, 1)}))
    drawn = {trace.name: trace.marker.color for trace in figure(study, "Timeline").data}
    assert drawn == {state: FRONTIER_STATES[state] for state in ("COMPLETE", "PRUNED", "FAIL")}


def test_optuna_views_name_the_objective_metric_on_their_axes() -> None:
    # Issue 28, point 9: Optuna's axis said "Objective Value", not the metric the study optimises.
    study = optuna.create_study()
    study.set_metric_names(["eval/gold_score"])
    for i in range(3):
        study.add_trial(create_trial(state=TrialState.COMPLETE, value=0.1 * i, params={"x": 0.1 * i, "y": 0.2},
                                     distributions={"x": FloatDistribution(0, 1), "y": FloatDistribution(0, 1)}))
    assert figure(study, "Optimization history").layout.yaxis.title.text == "eval/gold_score"
    assert "Objective Value" not in figure(study, "Slice").to_json()


def test_the_selected_trials_are_ringed_on_the_optimization_history() -> None:
    # Issue 28, point 9: selected trials were not highlighted in Optuna's views.
    from dashboard.optuna_views import mark_selected

    study = optuna.create_study()
    for i in range(4):
        study.add_trial(create_trial(state=TrialState.COMPLETE, value=0.1 * i, params={"x": 0.1 * i},
                                     distributions={"x": FloatDistribution(0, 1)}))
    drawn = mark_selected(figure(study, "Optimization history"), study, [1, 3, 99])
    (ring,) = [t for t in drawn.data if isinstance(t.meta, dict) and t.meta.get("role") == "selected"]
    assert list(ring.x) == [1, 3] and list(ring.y) == pytest.approx([0.1, 0.3])
    assert not [t for t in mark_selected(figure(study, "Optimization history"), study, []).data
                if isinstance(t.meta, dict)]
