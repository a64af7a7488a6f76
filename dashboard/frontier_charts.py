"""Plotly figures of the reward–KL frontier, built from :mod:`dashboard.frontier_reading`'s frames.

Every trace carries ``meta`` ({"trial": n, ...} or {"role": ...}) as :mod:`dashboard.charts` does.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dashboard.charts import STATE_WORD, group_colors
from dashboard.palette import FIT_COLOR, FRONT_COLOR, OTHER_STATE_COLOR, STATE_COLORS, THRESHOLD_COLOR, trial_color
from tuner.search.frontier_peak import kl_range
from tuner.search.peak_reading import PeakReading

# With points coloured by group, the state moves to the marker's shape.
STATE_SYMBOLS = {"COMPLETE": "circle", "PRUNED": "x", "FAIL": "diamond", "RUNNING": "triangle-up"}
OTHER_STATE_SYMBOL = "square"


def trajectory_figure(
    paths: pd.DataFrame, peaks: pd.DataFrame, states: Mapping[int, str] | None = None,
    groups: Mapping[int, str] | None = None,
) -> go.Figure:
    """Per trial, gold (solid, left axis) and proxy (dotted, right axis) against d = sqrt(KL), gold's peak marked.

    Proxy and gold are different scorers whose scales need not match, hence two y axes. Trace meta:
    {"trial": n, "series": "gold" | "proxy"} for the lines, {"role": "gold_peak", "trial": n} for the markers.
    Given ``groups`` (trial -> label), each trial is drawn in its group's colour and named with its group.
    """
    states = states or {}
    groups = groups or {}
    colors = group_colors(groups.values())
    has_gold = bool(paths["gold"].notna().any())
    # Without a gold score the proxy is the only line: solid, on the left axis.
    lines = (("gold", "solid", "y"), ("proxy", "dot", "y2")) if has_gold else (("proxy", "solid", "y"),)
    traces: list[go.Scatter] = []
    trials = paths["trial"].to_numpy(dtype=int)
    for n in sorted({int(t) for t in trials}):
        rows = paths[trials == n]
        color = colors[groups[n]] if n in groups else trial_color(n)
        word = STATE_WORD.get(states.get(n, ""), states.get(n, "").lower())
        label = f"#{n} {word}".strip() + (f" ({groups[n]})" if n in groups else "")
        x = rows["sqrt_kl"].to_numpy(dtype=float)
        for series, dash, axis in lines:
            y = rows[series].to_numpy(dtype=float)
            keep = np.isfinite(y)
            if not keep.any():
                continue
            traces.append(go.Scatter(
                x=x[keep], y=y[keep], mode="lines", yaxis=axis, name=f"{label} {series}",
                legendgroup=f"trial{n}", meta={"trial": n, "series": series},
                line={"color": color, "dash": dash, "width": 1.8 if series == "gold" else 1.2},
                hovertemplate=f"trial #{n} {series}<br>sqrt(KL) %{{x:.3g}}: %{{y:.4g}}<extra></extra>",
            ))
    columns = {c: peaks[c].to_numpy(dtype=float) for c in ("trial", "update", "kl", "sqrt_kl", "gold")}
    for trial, update, kl, sqrt_kl, gold in zip(*columns.values(), strict=True):
        n = int(trial)
        traces.append(go.Scatter(
            x=[float(sqrt_kl)], y=[float(gold)], mode="markers", name=f"#{n} gold peak",
            legendgroup=f"trial{n}", showlegend=False, meta={"role": "gold_peak", "trial": n},
            marker={"color": colors[groups[n]] if n in groups else trial_color(n), "symbol": "star", "size": 13,
                    "line": {"color": "black", "width": 1}},
            hovertemplate=(f"trial #{n} gold peak at update {int(update)}<br>KL {float(kl):.3g} "
                           f"(sqrt {float(sqrt_kl):.3g}), gold %{{y:.4g}}<extra></extra>"),
        ))
    proxy_axis = {"title": {"text": "proxy score (dotted)"}, "overlaying": "y", "side": "right", "showgrid": False}
    axes = ({"yaxis": {"title": {"text": "gold score (solid)"}}, "yaxis2": proxy_axis} if has_gold
            else {"yaxis": {"title": {"text": "proxy score"}}})
    layout = go.Layout(
        title={"text": f"{'Gold and proxy score' if has_gold else 'Proxy score'} against sqrt(KL)"}, height=440,
        margin={"l": 10, "r": 10, "t": 40, "b": 10}, hovermode="closest",
        # Below the plot: on the right the legend would sit on the proxy axis.
        legend={"orientation": "h", "y": -0.2, "font": {"size": 11}},
        xaxis={"title": {"text": "sqrt(KL to the reference policy)"}}, **axes,
    )
    return go.Figure(data=traces, layout=layout)


def _state_points(points: pd.DataFrame) -> list[go.Scatter]:
    traces = []
    for state, rows in points.groupby("state", sort=True):
        word = STATE_WORD.get(str(state), str(state).lower())
        traces.append(go.Scatter(
            x=rows["kl"].to_numpy(dtype=float), y=rows["y"].to_numpy(dtype=float), mode="markers", name=word,
            meta={"role": "points", "state": str(state)}, customdata=rows["trial"].to_numpy(dtype=int),
            marker={"color": STATE_COLORS.get(str(state), OTHER_STATE_COLOR), "size": 9},
            hovertemplate=f"trial #%{{customdata}} ({word})<br>KL %{{x:.3g}}: %{{y:.4g}}<extra></extra>",
        ))
    return traces


def _group_points(points: pd.DataFrame, groups: Mapping[int, str]) -> list[go.Scatter]:
    labels = points["trial"].map(lambda n: groups.get(int(n), "other"))
    colors = group_colors(labels)
    traces = []
    for label, rows in points.groupby(labels, sort=True):
        states = rows["state"].astype(str)
        traces.append(go.Scatter(
            x=rows["kl"].to_numpy(dtype=float), y=rows["y"].to_numpy(dtype=float), mode="markers", name=str(label),
            meta={"role": "points", "group": str(label)},
            customdata=np.column_stack([rows["trial"].to_numpy(dtype=int), states.map(STATE_WORD).fillna(states)]),
            marker={"color": colors[str(label)], "size": 10,
                    "symbol": [STATE_SYMBOLS.get(s, OTHER_STATE_SYMBOL) for s in states]},
            hovertemplate=f"trial #%{{customdata[0]}} ({label}, %{{customdata[1]}})<br>KL %{{x:.3g}}: "
                          "%{y:.4g}<extra></extra>",
        ))
    return traces


def frontier_figure(
    points: pd.DataFrame, front: pd.DataFrame, reading: PeakReading | None = None, y_title: str = "gold score",
    groups: Mapping[int, str] | None = None, kl_limit: float | None = None,
) -> go.Figure:
    """Each trial's final (KL, y) point coloured by state, the Pareto front of the COMPLETE ones as a line, and,
    given a peak reading, the study's smoothed gold curve, with a vertical marker at the peak's KL and its interval
    shaded where the data show a clear peak (the suggested ``kl_target``; :attr:`PeakReading.found`).

    Given ``groups`` (trial -> label, e.g. the estimator), points are coloured by group and their state is the
    marker's shape (:data:`STATE_SYMBOLS`). Trace meta: {"role": "points", "state": s} (or "group": g),
    {"role": "pareto_front"}, {"role": "fit"} (the smoothed curve), {"role": "kl_interval"}, {"role": "kl_star"}.
    """
    traces: list[go.Scatter] = _group_points(points, groups) if groups else _state_points(points)
    if not front.empty:
        traces.append(go.Scatter(
            x=front["kl"].to_numpy(dtype=float), y=front["y"].to_numpy(dtype=float), mode="lines",
            name="Pareto front", meta={"role": "pareto_front"}, line={"color": FRONT_COLOR, "shape": "hv", "width": 2},
            hoverinfo="skip",
        ))
    if reading is not None and reading.peak.curve_kl:
        peak = reading.peak
        traces.append(go.Scatter(
            x=list(peak.curve_kl), y=list(peak.curve_value), mode="lines", meta={"role": "fit"},
            name=f"gold, smoothed over {peak.points} evaluations",
            line={"color": FIT_COLOR, "dash": "dash", "width": 2},
            hovertemplate="smoothed gold<br>KL %{x:.3g}: %{y:.4g}<extra></extra>",
        ))
        if reading.found:
            ys = [*peak.curve_value, *points["y"].dropna().to_numpy(dtype=float)]
            low_y, high_y = min(ys), max(ys)
            traces.append(go.Scatter(
                x=[peak.kl_low, peak.kl_high, peak.kl_high, peak.kl_low, peak.kl_low],
                y=[low_y, low_y, high_y, high_y, low_y], mode="lines", fill="toself", meta={"role": "kl_interval"},
                name=f"peak's 80% interval: {kl_range(peak.kl_low, peak.kl_high)}", line={"width": 0},
                fillcolor="rgba(128, 128, 128, 0.15)", hoverinfo="skip",
            ))
            traces.append(go.Scatter(
                x=[peak.kl, peak.kl], y=[low_y, high_y], mode="lines", meta={"role": "kl_star"},
                name=f"gold peaks at KL {peak.kl:.3g}", line={"color": THRESHOLD_COLOR, "dash": "dot", "width": 2},
                hovertemplate=f"gold peaks at KL {peak.kl:.3g} nats: a suggested kl_target<extra></extra>",
            ))
    if kl_limit is not None:  # the study's constraint on this KL: trials right of it are infeasible
        measured = points["y"].dropna().to_numpy(dtype=float)
        low_y, high_y = (float(measured.min()), float(measured.max())) if len(measured) else (0.0, 1.0)
        traces.append(go.Scatter(
            x=[kl_limit, kl_limit], y=[low_y, high_y], mode="lines", meta={"role": "constraint"},
            name=f"constraint: KL ≤ {kl_limit:g}", line={"color": THRESHOLD_COLOR, "dash": "longdash", "width": 2},
            hovertemplate=f"the study's constraint: KL ≤ {kl_limit:g} nats<extra></extra>",
        ))
    layout = go.Layout(
        title={"text": "Final score against KL, by trial"}, height=400, margin={"l": 10, "r": 10, "t": 40, "b": 10},
        xaxis={"title": {"text": "KL to the reference policy (nats, summed over a response)"}},
        yaxis={"title": {"text": y_title}}, hovermode="closest",
    )
    return go.Figure(data=traces, layout=layout)


def traces_with_role(figure: go.Figure, role: str) -> list[go.Scatter]:
    """The figure's traces whose meta names ``role``."""
    return [t for t in figure.data if isinstance(t.meta, dict) and t.meta.get("role") == role]
