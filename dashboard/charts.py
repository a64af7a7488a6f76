"""Plotly figures built from the metrics frame: one line per trial, styled by state and selection.

Every trace carries ``meta`` ({"trial": n} or {"role": ...}) so tests and readers can tell lines apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative

from dashboard.frames import series_by_trial
from dashboard.palette import (
    MIN_CHROMA,
    MIN_REFERENCE_DISTANCE,
    REFERENCE_COLORS,
    THRESHOLD_COLOR,
    chroma,
    distance,
    trial_color,
)
from tuner.store.attrs import DEFAULT_KL_METRIC

# Few, strongly distinct colours for a handful of groups (not hundreds of trials), none a reference line's.
GROUP_PALETTE = [c for c in qualitative.Set1 if chroma(c) >= MIN_CHROMA
                 and all(distance(c, ref) >= MIN_REFERENCE_DISTANCE for ref in REFERENCE_COLORS)]
# Dotted is kept for the KL targets, so failed trials are dash-dot.
STATE_DASH = {"COMPLETE": "solid", "RUNNING": "solid", "PRUNED": "dash", "FAIL": "dashdot", "WAITING": "solid"}
STATE_WORD = {"COMPLETE": "complete", "RUNNING": "running", "PRUNED": "pruned", "FAIL": "failed", "WAITING": "waiting"}
MAX_LEGEND_TRIALS = 12  # beyond this a legend crowds the chart out; hovering still names the trial
X_TITLES = {"update": "PPO update", "episode": "episode"}


@dataclass(frozen=True)
class CurveStyle:
    """How trials are drawn: the x axis, smoothing, which trials stand out, and optional groups.

    ``groups`` maps trial numbers to a group label (e.g. each trial's ``advantage_estimator``): given, a trial is
    drawn in its group's colour and the legend lists the groups, each entry toggling all of its trials.
    """

    x: str = "update"
    smoothing: float = 0.0
    selected: frozenset[int] = field(default_factory=frozenset)
    groups: Mapping[int, str] = field(default_factory=dict)
    best: frozenset[int] = field(default_factory=frozenset)  # the best trial (or Pareto front): emphasised, labelled

    def named(self, number: int, n_trials: int) -> bool:
        """Whether a trial gets its own legend entry: every trial of a small study; in a large one the selected and
        the best, so the lines a reader looks at are always named."""
        return n_trials <= MAX_LEGEND_TRIALS or number in self.selected or number in self.best

    @cached_property
    def _group_colors(self) -> dict[str, str]:
        return group_colors(self.groups.values())

    def color(self, number: int) -> str:
        if number in self.groups:
            return self._group_colors[self.groups[number]]
        return trial_color(number)


def group_colors(labels: Iterable[str]) -> dict[str, str]:
    """A colour per group label, assigned in sorted order, so a group keeps its colour on every chart."""
    return {label: GROUP_PALETTE[i % len(GROUP_PALETTE)] for i, label in enumerate(sorted(set(labels)))}


def trial_label(number: int, state: str) -> str:
    return f"#{number} {STATE_WORD.get(state, state.lower())}"


def _line_style(number: int, state: str, style: CurveStyle) -> dict[str, Any]:
    highlighted = not style.selected or number in style.selected or number in style.best
    # The best trial stands out (wider, in its own colour), never greyed with the rest.
    width = 3.0 if number in style.selected or number in style.best else 1.6
    return {
        "line": {"color": style.color(number), "dash": STATE_DASH.get(state, "solid"), "width": width},
        "opacity": 1.0 if highlighted else 0.18,
    }


def _draw_order(numbers: Iterable[int], selected: frozenset[int]) -> list[int]:
    # Selected trials last, so they are drawn on top of the faded rest.
    return sorted(numbers, key=lambda n: (n in selected, n))


def _layout(title: str, y_title: str, x: str, n_trials: int, grouped: bool = False) -> go.Layout:
    return go.Layout(
        title={"text": title}, height=360, margin={"l": 10, "r": 10, "t": 40, "b": 10},
        xaxis={"title": {"text": X_TITLES.get(x, x)}}, yaxis={"title": {"text": y_title}}, hovermode="closest",
        showlegend=True, legend={"font": {"size": 11}},
    )


def _legend(number: int, state: str, style: CurveStyle, shown_groups: set[str], n_trials: int) -> dict[str, Any]:
    """A trial's legend entry: its own (in a large study only the selected and best trials have one), or, when
    grouped, one entry per group (on the group's first trace)."""
    group = style.groups.get(number)
    if group is None:
        best = " (best)" if number in style.best else ""
        return {"name": trial_label(number, state) + best, "legendgroup": _legend_group(number, style),
                "showlegend": style.named(number, n_trials)}
    first = group not in shown_groups
    shown_groups.add(group)
    return {"name": group, "legendgroup": _legend_group(number, style), "showlegend": first}


def _legend_group(number: int, style: CurveStyle) -> str:
    group = style.groups.get(number)
    return f"trial{number}" if group is None else f"group:{group}"


def _trial_traces(
    series: Mapping[int, tuple[np.ndarray, np.ndarray]], states: Mapping[int, str], style: CurveStyle
) -> list[dict[str, Any]]:
    # Plain dicts, not go.Scatter: go.Figure validates a dict once, but copies and validates a go.Scatter again
    # (a 200-trial figure in about a third of the time).
    shown_groups: set[str] = set()
    traces = []
    for number in _draw_order(series, style.selected | style.best):
        group = style.groups.get(number)
        meta = {"trial": number, "state": states[number]} | ({"group": group} if group is not None else {})
        label = f"trial #{number}" + (f" ({group})" if group is not None else "")
        traces.append(dict(
            type="scatter", x=series[number][0], y=series[number][1], mode="lines", meta=meta,
            hovertemplate=f"{label}<br>%{{x}}: %{{y:.4g}}<extra></extra>",
            **_legend(number, states[number], style, shown_groups, len(series)),
            **_line_style(number, states[number], style),
        ))
    return traces


def curves_figure(
    metrics: pd.DataFrame, metric: str, states: Mapping[int, str], style: CurveStyle, title: str | None = None,
) -> go.Figure:
    """One line per trial in ``states`` for ``metric``; pruned dashed, failed dash-dot, selected bold."""
    series = series_by_trial(metrics, metric, style.x, style.smoothing, states)
    # All traces at once: adding them one by one copies the figure's data each time.
    return go.Figure(data=_trial_traces(series, states, style),
                     layout=_layout(title or metric, metric, style.x, len(series), bool(style.groups)))


def _horizontal(y: float, x_range: tuple[float, float], **trace: object) -> dict[str, Any]:
    return {"type": "scatter", "x": list(x_range), "y": [y, y], "mode": "lines", **trace}


def kl_figure(
    metrics: pd.DataFrame, states: Mapping[int, str], style: CurveStyle, threshold: float,
    targets: Mapping[int, float], metric: str = DEFAULT_KL_METRIC,
) -> go.Figure:
    """KL per trial, with the blow-up threshold and each adaptive trial's KL target (dotted, in its colour)."""
    series = series_by_trial(metrics, metric, style.x, style.smoothing, states)
    traces = _trial_traces(series, states, style)
    for number in _draw_order((n for n in targets if n in series), style.selected):
        x = series[number][0]
        line = _line_style(number, states[number], style)
        traces.append(_horizontal(
            targets[number], (float(x.min()), float(x.max())), name=f"#{number} KL target {targets[number]:g}",
            legendgroup=_legend_group(number, style), showlegend=False, meta={"role": "target", "trial": number},
            line={**line["line"], "dash": "dot", "width": 1.2}, opacity=line["opacity"],
            hovertemplate=f"trial #{number} KL target {targets[number]:g}<extra></extra>",
        ))
    if series:
        low = min(float(x.min()) for x, _ in series.values())
        high = max(float(x.max()) for x, _ in series.values())
        traces.append(_horizontal(
            threshold, (low, high), name=f"blow-up threshold {threshold:g}", meta={"role": "threshold"},
            line={"color": THRESHOLD_COLOR, "dash": "longdash", "width": 2}, showlegend=True,
            hovertemplate=f"blow-up threshold {threshold:g} nats<extra></extra>",
        ))
    layout = _layout(f"Training KL to the reference policy ({metric}, nats summed over a response)", metric,
                     style.x, len(series), bool(style.groups))
    if any(float(np.nanmin(y)) < 0 for _, y in series.values() if len(y)):
        # k1 = log(pi / pi_ref) on the sampled tokens is an unbiased estimate of KL, but a single batch's can dip
        # under 0, which a reader would otherwise take for a bug.
        layout.update(annotations=[{
            "text": "below 0: the k1 estimate (log-ratio on sampled tokens) is unbiased but not ≥ 0 on one batch",
            "xref": "paper", "yref": "paper", "x": 0.0, "y": 1.0, "xanchor": "left", "yanchor": "bottom",
            "showarrow": False, "font": {"size": 10}}])
    return go.Figure(data=traces, layout=layout)


def beta_figure(metrics: pd.DataFrame, states: Mapping[int, str], style: CurveStyle) -> go.Figure:
    """β (``objective/kl_coef``) in force at each update, for the trials given (the adaptive ones)."""
    return curves_figure(metrics, "objective/kl_coef", states, style, title="β in force (objective/kl_coef)")


def trial_traces(figure: go.Figure) -> list[go.Scatter]:
    """The traces that draw a trial's curve (not thresholds or targets)."""
    return [t for t in figure.data if isinstance(t.meta, dict) and "trial" in t.meta and "role" not in t.meta]
