"""The selected trials marked on Optuna's own views, as every other page highlights them.

Each view places a trial differently, so each has its own marker: a ring at the trial's point on the optimization
history, the slices, the contour plots and the Pareto front; its line drawn dark and wide over the others on the
parallel coordinates; an outline on its bar in the timeline. Parameter importances show no trial, so nothing is
marked there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import optuna
import plotly.graph_objects as go
from optuna.trial import FrozenTrial, TrialState

SELECTED_COLOR = "#111111"  # near-black: not a trial colour (dashboard.palette) and readable on Optuna's blues
# An open symbol is stroked in the marker's colour (its line colour is ignored): both set, or the theme's first
# colour shows instead.
RING = {"size": 14, "symbol": "circle-open", "color": SELECTED_COLOR, "line": {"width": 2.5, "color": SELECTED_COLOR}}
SELECTED_NAME = "selected trials"


def _ring(x: Sequence[Any], y: Sequence[Any], numbers: Sequence[int], first: bool, **axes: str) -> go.Scatter:
    return go.Scatter(
        x=list(x), y=list(y), mode="markers", name=SELECTED_NAME, legendgroup="selected", showlegend=first,
        meta={"role": "selected", "trials": list(numbers)}, marker=RING, customdata=list(numbers),
        hovertemplate="selected trial #%{customdata}<extra></extra>", **axes,
    )


def _complete(study: optuna.Study) -> list[FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.values]


def _history(drawn: go.Figure, study: optuna.Study, selected: set[int], objective: int) -> None:
    chosen = [t for t in _complete(study) if t.number in selected]
    if chosen:
        drawn.add_trace(_ring([t.number for t in chosen], [t.values[objective] for t in chosen],
                              [t.number for t in chosen], first=True))


def _slice(drawn: go.Figure, study: optuna.Study, selected: set[int], objective: int) -> None:
    # Optuna colours each slice's points by trial number: the numbers say which point is which trial.
    first = True
    for trace in list(drawn.data):
        numbers = trace.marker.color if isinstance(trace, go.Scatter) and trace.marker is not None else None
        if numbers is None or isinstance(numbers, str) or trace.x is None or len(numbers) != len(trace.x):
            continue
        at = [i for i, n in enumerate(numbers) if int(n) in selected]
        if at:
            drawn.add_trace(_ring([trace.x[i] for i in at], [trace.y[i] for i in at], [int(numbers[i]) for i in at],
                                  first, xaxis=trace.xaxis or "x", yaxis=trace.yaxis or "y"))
            first = False


def _parallel(drawn: go.Figure, study: optuna.Study, selected: set[int], objective: int) -> None:
    # One line per completed trial with a finite value, in the study's order (Optuna's draw order for one target).
    trials = [t for t in _complete(study) if math.isfinite(t.values[objective])]
    # The trials' lines carry their values as customdata; a study with constraints adds legend-only lines too.
    lines = [trace for trace in drawn.data
             if isinstance(trace, go.Scatter) and trace.mode == "lines" and trace.customdata is not None]
    if len(lines) != len(trials):
        return
    first = True
    for trial, line in zip(trials, lines, strict=True):
        if trial.number in selected:
            drawn.add_trace(go.Scatter(
                x=line.x, y=line.y, customdata=line.customdata, hovertemplate=line.hovertemplate, mode="lines",
                name=SELECTED_NAME, legendgroup="selected", showlegend=first,
                meta={"role": "selected", "trials": [trial.number]},
                line={"color": SELECTED_COLOR, "width": 3.5, "dash": line.line.dash},
            ))
            first = False


def _contour_params(drawn: go.Figure, params: list[str], xaxis: str, yaxis: str) -> tuple[str | None, str | None]:
    """The parameters on a contour subplot's axes. With two parameters Optuna draws one plot whose axes are titled;
    with more, a grid of every pair in sorted order, titled only along its edges: the subplot's place says."""
    if len(params) <= 2:
        return drawn.layout[f"xaxis{xaxis[1:]}"].title.text, drawn.layout[f"yaxis{yaxis[1:]}"].title.text
    row, column = divmod(int(xaxis[1:] or 1) - 1, len(params))
    return params[column], params[row]


def _contour(drawn: go.Figure, study: optuna.Study, selected: set[int], objective: int) -> None:
    complete = _complete(study)
    params = sorted({name for t in complete for name in t.params})
    chosen = [t for t in complete if t.number in selected]
    first = True
    for trace in list(drawn.data):
        if not (isinstance(trace, go.Scatter) and trace.name and trace.name.endswith("Trial")):
            continue
        xaxis, yaxis = trace.xaxis or "x", trace.yaxis or "y"
        x_param, y_param = _contour_params(drawn, params, xaxis, yaxis)
        here = [t for t in chosen if x_param in t.params and y_param in t.params]
        if x_param is None or y_param is None or not here:
            continue

        def shown(value: Any, axis: str) -> Any:  # a categorical axis holds its values as text
            return str(value) if drawn.layout[f"{axis[0]}axis{axis[1:]}"].type == "category" else value

        ring = _ring([shown(t.params[x_param], xaxis) for t in here], [shown(t.params[y_param], yaxis) for t in here],
                     [t.number for t in here], first, xaxis=xaxis, yaxis=yaxis)
        ring.marker.update(size=9, line={"width": 1.5})  # a contour subplot is small
        drawn.add_trace(ring)
        first = False


def _timeline(drawn: go.Figure, study: optuna.Study, selected: set[int], objective: int) -> None:
    for trace in drawn.data:
        if isinstance(trace, go.Bar) and trace.y is not None:
            trace.marker.line = {"color": SELECTED_COLOR,
                                 "width": [3 if int(n) in selected else 0 for n in trace.y]}


def _pareto(drawn: go.Figure, study: optuna.Study, selected: set[int], objective: int) -> None:
    if len(study.directions) != 2:  # three objectives are a 3-D scatter, left as Optuna draws it
        return
    chosen = [t for t in _complete(study) if t.number in selected]
    if chosen:
        drawn.add_trace(_ring([t.values[0] for t in chosen], [t.values[1] for t in chosen],
                              [t.number for t in chosen], first=True))


MARKERS: dict[str, Callable[[go.Figure, optuna.Study, set[int], int], None]] = {
    "Optimization history": _history, "Slice": _slice, "Parallel coordinates": _parallel, "Contour": _contour,
    "Timeline": _timeline, "Pareto front": _pareto,
}


def mark_selected(drawn: go.Figure, study: optuna.Study, view: str, selected: Sequence[int],
                  objective: int = 0) -> go.Figure:
    """``drawn`` (Optuna's figure for ``view``) with the selected trials marked; unchanged when none is selected
    or the view shows no trial.

    >>> mark_selected(figure(study, "Slice"), study, "Slice", [3, 7])  # doctest: +SKIP
    """
    wanted = set(selected)
    if wanted and view in MARKERS:
        MARKERS[view](drawn, study, wanted, objective)
    return drawn
