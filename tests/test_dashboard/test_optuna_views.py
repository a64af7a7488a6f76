"""Optuna's views as the dashboard shows them (dashboard.optuna_views): the objective named on their axes, states in
the dashboard's colours."""

from __future__ import annotations

from typing import Any

import optuna
import plotly.graph_objects as go
import pytest
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial

from dashboard.frames import MISSING
from dashboard.frontier_charts import STATE_COLORS as FRONTIER_STATES
from dashboard.optuna_marks import SELECTED_COLOR, mark_selected
from dashboard.optuna_views import ANGLED_AFTER, CONTOUR_ROW_PX, VIEWS, WRAP_AT, figure, wrapped


def test_the_timeline_colours_states_as_every_other_page() -> None:
    study = optuna.create_study()
    for state in ("COMPLETE", "PRUNED", "FAIL"):
        study.add_trial(create_trial(state=TrialState[state], value=1.0 if state == "COMPLETE" else None,
                                     params={"x": 0.1}, distributions={"x": FloatDistribution(0, 1)}))
    drawn = {trace.name: trace.marker.color for trace in figure(study, "Timeline").data}
    assert drawn == {state: FRONTIER_STATES[state] for state in ("COMPLETE", "PRUNED", "FAIL")}


def test_optuna_views_name_the_objective_metric_on_their_axes() -> None:
    # Optuna's own axis title is "Objective Value"; the views name the metric the study optimises instead.
    study = optuna.create_study()
    study.set_metric_names(["eval/gold_score"])
    for i in range(3):
        study.add_trial(create_trial(state=TrialState.COMPLETE, value=0.1 * i, params={"x": 0.1 * i, "y": 0.2},
                                     distributions={"x": FloatDistribution(0, 1), "y": FloatDistribution(0, 1)}))
    assert figure(study, "Optimization history").layout.yaxis.title.text == "eval/gold_score"
    for view in ("Optimization history", "Slice", "Parallel coordinates", "Contour", "Parameter importances"):
        assert "Objective Value" not in figure(study, view).to_json(), view
    assert "eval/gold_score" in figure(study, "Parallel coordinates").layout.xaxis.ticktext  # its first axis


SPACE = {"x": FloatDistribution(0, 1), "lr": FloatDistribution(1e-6, 1e-3, log=True),
         "kind": CategoricalDistribution(["a", "b"])}


def marked_study() -> optuna.Study:
    """Six trials whose numbers are not their places among the complete ones: a pruned and a failed trial first."""
    study = optuna.create_study(direction="maximize")
    study.set_metric_names(["eval/gold_score"])
    study.add_trial(create_trial(state=TrialState.PRUNED, value=0.99, params={"x": 0.9},
                                 distributions={"x": SPACE["x"]}, intermediate_values={3: 0.99}))
    study.add_trial(create_trial(state=TrialState.FAIL))
    for i in range(4):
        # With constraints (one broken), as the tuner stores them: Optuna then adds legend-only lines.
        study.add_trial(create_trial(state=TrialState.COMPLETE, value=0.1 * i,
                                     params={"x": 0.1 * i, "lr": 10 ** (-5 + i / 2), "kind": "ab"[i % 2]},
                                     distributions=SPACE, system_attrs={"constraints": [1.0 if i == 2 else -1.0]}))
    return study


def rings(drawn: go.Figure) -> list[Any]:
    """The traces mark_selected added; plotly ships no type information, so they are untyped."""
    return [t for t in drawn.data if isinstance(t.meta, dict) and t.meta.get("role") == "selected"]


SELECTED = [3, 5, 0, 99]  # complete #3 (place 1) and #5 (place 3); the pruned #0 and an unknown #99 are not drawn


def test_the_selected_trials_are_ringed_on_the_optimization_history() -> None:
    # The selected trials are highlighted in Optuna's views, as on every other page.
    study = marked_study()
    (ring,) = rings(mark_selected(figure(study, "Optimization history"), study, "Optimization history", SELECTED))
    assert list(ring.x) == [3, 5] and list(ring.y) == pytest.approx([0.1, 0.3])
    # An open marker is stroked in its own colour: without it the theme's first colour (a trial's) showed.
    assert ring.marker.color == ring.marker.line.color == SELECTED_COLOR
    assert not rings(mark_selected(figure(study, "Optimization history"), study, "Optimization history", []))


def test_the_selected_trials_are_ringed_on_every_slice() -> None:
    study = marked_study()
    drawn = mark_selected(figure(study, "Slice"), study, "Slice", SELECTED)
    by_axis = {t.xaxis: t for t in rings(drawn)}
    assert len(by_axis) == 3 and sum(t.showlegend for t in by_axis.values()) == 1  # one legend entry
    titles = {f"x{'' if i == 1 else i}": drawn.layout[f"xaxis{'' if i == 1 else i}"].title.text for i in (1, 2, 3)}
    for axis, ring in by_axis.items():
        assert list(ring.meta["trials"]) == [3, 5]
        assert list(ring.y) == pytest.approx([0.1, 0.3])
        param = titles[axis]
        expected = {"x": [0.1, 0.3], "lr": [10 ** -4.5, 10 ** -3.5], "kind": ["b", "b"]}[param]
        if param == "kind":
            assert [str(v).strip("'") for v in ring.x] == expected
        else:
            assert list(ring.x) == pytest.approx(expected), param


def test_the_selected_trials_lines_are_drawn_dark_on_the_parallel_coordinates() -> None:
    study = marked_study()
    plain = figure(study, "Parallel coordinates")
    lines = [t for t in plain.data if t.mode == "lines" and t.customdata is not None]
    assert len(lines) < len([t for t in plain.data if t.mode == "lines"])  # the feasibility legend's lines
    drawn = mark_selected(figure(study, "Parallel coordinates"), study, "Parallel coordinates", SELECTED)
    marked = rings(drawn)
    assert [t.meta["trials"] for t in marked] == [[3], [5]]
    # Each over its own trial's line (complete trials in study order: #3 is the second, #5 the fourth).
    assert [list(t.y) for t in marked] == [list(lines[1].y), list(lines[3].y)]
    assert all(t.line.color == SELECTED_COLOR and t.line.width > lines[0].line.width for t in marked)


def test_the_selected_trials_are_ringed_on_the_contours() -> None:
    study = marked_study()
    drawn = mark_selected(figure(study, "Contour"), study, "Contour", SELECTED)
    marked = rings(drawn)
    assert len(marked) == 6  # three parameters: six off-diagonal subplots
    points = {(t.xaxis, t.yaxis): set(zip(t.x, t.y, strict=True)) for t in drawn.data
              if t.type == "scatter" and t.name == "Feasible Trial"}
    for ring in marked:
        # Each ring sits on a point Optuna drew in its own subplot: the selected trial's pair of values.
        assert list(ring.meta["trials"]) == [3, 5]
        assert set(zip(ring.x, ring.y, strict=True)) <= points[ring.xaxis, ring.yaxis], (ring.xaxis, ring.yaxis)


def test_the_selected_trials_are_outlined_on_the_timeline() -> None:
    study = marked_study()
    drawn = mark_selected(figure(study, "Timeline"), study, "Timeline", SELECTED)
    outlined = {int(n) for bar in drawn.data for n, width in zip(bar.y, bar.marker.line.width, strict=True) if width}
    assert outlined == {0, 3, 5}  # the timeline shows every trial, the pruned one too
    assert {bar.marker.line.color for bar in drawn.data} == {SELECTED_COLOR}


def test_the_selected_trials_are_ringed_on_the_pareto_front() -> None:
    study = optuna.create_study(directions=["maximize", "minimize"])
    for i in range(4):
        study.add_trial(create_trial(state=TrialState.COMPLETE, values=[0.1 * i, i % 3], params={"x": 0.1 * i},
                                     distributions={"x": SPACE["x"]}))
    (ring,) = rings(mark_selected(figure(study, "Pareto front"), study, "Pareto front", [1, 2]))
    assert list(ring.x) == pytest.approx([0.1, 0.2]) and list(ring.y) == [1, 2]


def test_no_view_is_marked_without_a_selection_and_importances_never() -> None:
    study = marked_study()
    for view in [v for v in VIEWS if v != "Pareto front"]:
        assert figure(study, view).to_json() == mark_selected(figure(study, view), study, view, []).to_json(), view
    importances = figure(study, "Parameter importances")
    assert mark_selected(importances, study, "Parameter importances", SELECTED).to_json() == \
        figure(study, "Parameter importances").to_json()


@pytest.mark.parametrize("params", [3, ANGLED_AFTER + 2])
def test_the_parallel_coordinates_keep_their_labels_whole(params: int) -> None:
    # Labels stay whole at the edges (not clipped to ".78" or "199") and the axis names do not overlap.
    study = optuna.create_study()
    space: dict[str, BaseDistribution] = {f"learning_rate_{i}": FloatDistribution(1e-6, 1e-3, log=True)
                                          for i in range(params)}
    for i in range(3):
        study.add_trial(create_trial(state=TrialState.COMPLETE, value=0.777 + i, distributions=space,
                                     params={name: 10 ** (-5 + i / 2) for name in space}))
    drawn = figure(study, "Parallel coordinates")
    # The first axis's tick labels sit left of it, the colour bar right of the last: margins hold them.
    widest = max(len(a.text) for a in drawn.layout.annotations if a.x == 0)
    assert drawn.layout.margin.l >= 7 * widest and drawn.layout.margin.r >= 60
    assert (drawn.layout.xaxis.tickangle not in (None, 0)) == (params + 1 > ANGLED_AFTER)


def test_many_slices_keep_their_names_whole_and_apart() -> None:
    # Nine slices in one row would run their names together ("learning_ratemini_batch_size"): each stays apart.
    study = optuna.create_study()
    space: dict[str, BaseDistribution] = {f"{name}_{i}": FloatDistribution(1e-6, 1e-3, log=True)
                                          for i, name in enumerate(["value_learning_rate"] * (ANGLED_AFTER + 2))}
    for i in range(3):
        study.add_trial(create_trial(state=TrialState.COMPLETE, value=0.1 * i, distributions=space,
                                     params={name: 10 ** (-5 + i / 2) for name in space}))
    drawn = figure(study, "Slice")
    titles = [drawn.layout[a].title.text for a in drawn.layout if a.startswith("xaxis")]
    assert sorted(t.replace("<br>", "") for t in titles) == sorted(space)  # every name, whole
    assert all(len(line) <= WRAP_AT for t in titles for line in t.split("<br>"))
    assert drawn.layout.legend.orientation == "h"  # clear of the colour bar's title


def test_wrapped_breaks_a_long_name_after_underscores() -> None:
    assert wrapped("value_learning_rate") == "value_<br>learning_<br>rate"
    assert wrapped("num_ppo_epochs") == "num_ppo_<br>epochs"
    assert wrapped("cliprange") == "cliprange" and wrapped("averyveryverylongname") == "averyveryverylongname"


def test_a_grid_of_contours_gets_the_height_its_rows_need() -> None:
    # Nine parameters make 81 contours: in Optuna's 450 px their names would sit on top of each other.
    study = marked_study()
    drawn = figure(study, "Contour")
    assert drawn.layout.height >= 3 * CONTOUR_ROW_PX
    titles = [drawn.layout[a].title.text for a in drawn.layout if a.startswith(("xaxis", "yaxis"))]
    assert {t for t in titles if t} == set(SPACE)


def test_a_parameter_a_trial_does_not_use_reads_as_on_every_other_page() -> None:
    # Optuna's parallel coordinates write "None" on their own; here they write MISSING, as every table does.
    study = optuna.create_study()
    space = {"kl_coef": FloatDistribution(0.01, 0.2), "x": FloatDistribution(0, 1)}
    for i in range(3):  # the first trial uses no kl_coef (an adaptive-KL trial)
        params = {"x": 0.1 * i, **({"kl_coef": 0.05 * i} if i else {})}
        study.add_trial(create_trial(state=TrialState.COMPLETE, value=0.1 * i, params=params,
                                     distributions={k: space[k] for k in params}))
    drawn = figure(study, "Parallel coordinates")
    texts = [a.text for a in drawn.layout.annotations]
    hovers = [value for t in drawn.data if t.customdata is not None for _, value in t.customdata]
    assert MISSING in texts and MISSING in hovers and "None" not in texts + hovers
