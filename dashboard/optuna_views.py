"""Optuna's own plotly views of a study (optuna.visualization), with the preconditions each one needs.

A view that cannot be drawn yet (too few trials, a single parameter) is answered with a message for
the page to show, never an exception.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable
from typing import Any

import optuna
import plotly.graph_objects as go
from optuna import visualization
from optuna.trial import TrialState

from dashboard.frames import MISSING
from dashboard.palette import STATE_COLORS
from dashboard.study_reader import objective_names

VIEWS = ("Optimization history", "Parameter importances", "Parallel coordinates", "Slice", "Contour", "Timeline",
         "Pareto front")


ANGLED_AFTER = 5  # past this many axes the parallel coordinates' and slices' labels are angled or wrapped
CONTOUR_ROW_PX = 110  # each row of a contour grid of more than two parameters (Optuna's whole grid is 450 px)
OPTUNA_MISSING = "None"  # the parallel coordinates' label for a parameter a trial lacks
WRAP_AT = 10  # characters of a slice's parameter name that fit under it, past ANGLED_AFTER slices


class NotDrawable(Exception):
    """Why a view cannot be drawn for this study yet; the message is shown to the user."""


def available_views(multi_objective: bool) -> list[str]:
    return [v for v in VIEWS if multi_objective or v != "Pareto front"]


def _requirements(study: optuna.Study, view: str) -> str | None:
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    params = {name for trial in complete for name in trial.params}
    if view == "Timeline":
        return None if study.get_trials(deepcopy=False) else "The timeline needs at least one trial."
    if view == "Pareto front":
        if len(study.directions) < 2:
            return "The Pareto front needs a study with several objectives."
        return None if complete else "The Pareto front needs at least one completed trial."
    needed = 2 if view in ("Parameter importances", "Contour", "Parallel coordinates") else 1
    if len(complete) < needed:
        return f"{view} needs at least {needed} completed trial{'s' if needed > 1 else ''}; " \
               f"this study has {len(complete)}."
    if view != "Optimization history" and not params:
        return f"{view} needs searched parameters; the completed trials have none."
    if view == "Contour" and len(params) < 2:
        return "The contour plot needs at least two searched parameters; this study searches one."
    if view == "Parameter importances" and len({tuple(sorted(t.params.items())) for t in complete}) < 2:
        return "Parameter importances need completed trials with different parameter values."
    return None


def _target(study: optuna.Study, objective: int) -> dict[str, Any]:
    """Which value the view plots, named as the study names its objective (Optuna's own says "Objective Value")."""
    name = objective_names(study)[objective]
    if len(study.directions) == 1:
        return {"target_name": name}
    return {"target": lambda trial: trial.values[objective], "target_name": name}


def wrapped(name: str, width: int = WRAP_AT) -> str:
    """A parameter name over ``width`` characters broken after underscores into lines of at most ``width`` where
    its parts allow: ``value_<br>learning_<br>rate``. The name stays whole; only where it breaks changes."""
    lines = [""]
    for part in re.findall(r"[^_]*_|[^_]+$", name):
        if lines[-1] and len(lines[-1]) + len(part) > width:
            lines.append("")
        lines[-1] += part
    return "<br>".join(lines)


def _axes_whole(drawn: go.Figure, prefixes: tuple[str, ...]) -> None:
    """Names wrapped to fit a narrow subplot, ticks small and angled, one label a decade on a log axis."""
    for name in [n for n in drawn.layout if n.startswith(prefixes)]:
        axis = drawn.layout[name]
        axis.update(title={"text": wrapped(axis.title.text or ""), "font": {"size": 11}}, nticks=4,
                    tickfont={"size": 9}, **({"tickangle": -45} if name.startswith("xaxis") else {}))
        if axis.type == "log":  # plotly's 2 and 5 between decades crowd a narrow subplot
            axis.dtick = 1


def _many_subplots_whole(drawn: go.Figure, view: str) -> None:
    """Optuna puts every slice in one row, and every pair of parameters in a square grid of contours: past a few
    parameters their names and ticks run into each other."""
    if view == "Slice" and len([n for n in drawn.layout if n.startswith("xaxis")]) > ANGLED_AFTER:
        _axes_whole(drawn, ("xaxis",))
        drawn.update_layout(margin={"b": 120})
    if view == "Contour":
        side = math.isqrt(len([n for n in drawn.layout if n.startswith("xaxis")]))
        if side > 2:
            _axes_whole(drawn, ("xaxis", "yaxis"))
            drawn.update_layout(height=CONTOUR_ROW_PX * side + 200, margin={"b": 120, "l": 120})
    # Above the plot: on the right the legend (the selected trials' ring) sat on the colour bar's title.
    drawn.update_layout(legend={"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"})


def _missing_as_elsewhere(drawn: go.Figure) -> None:
    """A parameter a trial does not use (kl_coef under adaptive KL) reads as on every other page, not Optuna's
    "None" (a categorical choice named None, Optuna labels "None (value)")."""
    for annotation in drawn.layout.annotations:
        if annotation.text == OPTUNA_MISSING:
            annotation.text = MISSING
    for trace in drawn.data:
        if isinstance(trace, go.Scatter) and trace.customdata is not None:
            trace.customdata = [[name, MISSING if value == OPTUNA_MISSING else value]
                                for name, value in trace.customdata]


def figure(study: optuna.Study, view: str, objective: int = 0) -> go.Figure:
    """Optuna's figure for ``view``; raises :class:`NotDrawable` with the reason when it cannot be drawn."""
    problem = _requirements(study, view)
    if problem:
        raise NotDrawable(problem)
    target = _target(study, objective)
    draw: dict[str, Callable[[], go.Figure]] = {
        "Optimization history": lambda: visualization.plot_optimization_history(study, **target),
        "Parameter importances": lambda: visualization.plot_param_importances(study, **target),
        "Parallel coordinates": lambda: visualization.plot_parallel_coordinate(study, **target),
        "Slice": lambda: visualization.plot_slice(study, **target),
        "Contour": lambda: visualization.plot_contour(study, **target),
        "Timeline": lambda: visualization.plot_timeline(study),
        "Pareto front": lambda: visualization.plot_pareto_front(study, target_names=list(objective_names(study))),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Optuna marks some views experimental; the page is no place for that
        try:
            drawn = draw[view]()
        except (ValueError, RuntimeError, ZeroDivisionError) as error:
            raise NotDrawable(f"Optuna could not draw {view.lower()} for this study: {error}") from error
    # Room for whole labels: Optuna's parallel coordinates clip its axis titles and tick labels at the edges.
    drawn.update_layout(margin={"l": 80, "r": 80, "t": 80, "b": 40})
    if view == "Parallel coordinates" and len(drawn.layout.xaxis.tickvals or ()) > ANGLED_AFTER:
        # Parameter names side by side under a dozen axes overlap ("value_learning_rate" is 19 characters).
        drawn.update_xaxes(tickangle=-30)
        drawn.update_layout(margin={"b": 120})
    if view == "Parallel coordinates":
        _missing_as_elsewhere(drawn)
    if view in ("Slice", "Contour"):
        _many_subplots_whole(drawn, view)
    if view == "Timeline":  # one colour per state on every page: Optuna's own would make complete trials blue
        for trace in drawn.data:
            if trace.name in STATE_COLORS:
                trace.marker.color = STATE_COLORS[trace.name]
    return drawn
