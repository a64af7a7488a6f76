"""The Population page's figures, from ``dashboard.population_frames``' frames: the lineage tree, one lineage's
learning rate and KL coefficient as steps, and its stitched curves.

Every trace carries ``meta`` ({"role": ..., "trial": n where it draws one trial}) so tests can tell traces apart.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from dashboard.palette import FRONT_COLOR, OTHER_STATE_COLOR, STATE_COLORS
from dashboard.population_frames import HELD_OUT_KL, PROXY, TRAINING_KL

VALUE_SCALE = "Viridis"
# The Frontier page's marks for how a trial ended.
END_SYMBOLS = {"PRUNED": "x", "FAIL": "diamond", "RUNNING": "triangle-up"}
END_WORDS = {"COMPLETE": "complete", "PRUNED": "pruned", "FAIL": "failed", "RUNNING": "running", "WAITING": "waiting"}
BACKTRACK_SHIFT = 0.3
"""How far below its member's row a segment that went back to an earlier point is drawn: it retrains updates its
member's earlier segments already drew."""
CURVE_NAMES = {PROXY: "proxy (objective/scores)", HELD_OUT_KL: "held-out KL (eval/kl)",
               TRAINING_KL: "training KL (objective/kl)"}


def _colors(values: pd.Series) -> list[str]:
    """Each value's colour on the value scale, lowest to highest; grey where there is no value."""
    finite = values[values.map(math.isfinite)]
    low, high = (float(finite.min()), float(finite.max())) if not finite.empty else (0.0, 1.0)
    span = high - low or 1.0
    return [sample_colorscale(VALUE_SCALE, [(v - low) / span])[0] if math.isfinite(v) else OTHER_STATE_COLOR
            for v in values]


def _row_y(row: Mapping[Any, Any]) -> float:
    """Where a segment is drawn: its member's row, a little below it for one that went back to an earlier point."""
    return float(row["member"]) + (BACKTRACK_SHIFT if row["origin"] == "backtrack" else 0.0)


def _hover(row: pd.Series, value_label: str) -> str:
    value = f"{row['value']:.4g}" if math.isfinite(row["value"]) else "none (" + END_WORDS.get(row["state"], "") + ")"
    mutated = row["mutated"] or "nothing mutated"
    origin = {"start": "started by the sampler", "continue": "its own line",
              "backtrack": f"went back to #{row['parent']} at update {row['start']}: {mutated}"}.get(
        row["origin"], f"copied #{row['parent']}: {mutated}")
    return (f"trial #{row['trial']}, member {row['member']}, generation {row['generation']}<br>"
            f"updates {row['start'] + 1}-{row['stop']}<br>{value_label}: {value}<br>{origin}")


def lineage_figure(segments: pd.DataFrame, edges: pd.DataFrame, value_label: str,
                   chosen: pd.DataFrame | None = None) -> go.Figure:
    """One row per member; each segment a line from (start, member) to (stop, member) coloured by its value (one
    that went back to an earlier point a little below its row), each copy a dotted edge from its parent's end (a
    dashed one from the earlier point a backtrack went back to), ✕ and ◆ where a segment was pruned or failed, and
    the ``chosen`` lineage's segments outlined."""
    figure = go.Figure()
    for edge in edges.to_dict("records"):
        back = edge["origin"] == "backtrack"
        figure.add_trace(go.Scatter(
            x=[edge["x0"], edge["x1"]], y=[edge["y0"], edge["y1"] + (BACKTRACK_SHIFT if back else 0.0)],
            mode="lines", hoverinfo="skip", showlegend=False,
            line={"color": "#888888", "width": 1.5 if back else 1, "dash": "dash" if back else "dot"},
            meta={"role": "backtrack" if back else "copy", "trial": int(edge["trial"])}))
    for row in ([] if chosen is None else chosen.to_dict("records")):
        y = _row_y(row)
        figure.add_trace(go.Scatter(x=[row["start"], row["stop"]], y=[y, y], mode="lines",
                                    hoverinfo="skip", line={"color": FRONT_COLOR, "width": 11}, showlegend=False,
                                    meta={"role": "chosen", "trial": int(row["trial"])}))
    colors = _colors(segments["value"])
    for row, color in zip(segments.to_dict("records"), colors, strict=True):
        y = _row_y(row)
        figure.add_trace(go.Scatter(x=[row["start"], row["stop"]], y=[y, y], mode="lines",
                                    hoverinfo="skip", line={"color": color, "width": 7}, showlegend=False,
                                    meta={"role": "segment", "trial": int(row["trial"])}))
    # The hover and the colour bar ride on one point per segment, at its middle: a line's hover reads only its ends.
    finite = segments[segments["value"].map(math.isfinite)]
    rows_y = [_row_y(row) for row in segments.to_dict("records")]
    figure.add_trace(go.Scatter(
        x=(segments["start"] + segments["stop"]) / 2, y=rows_y, mode="markers",
        marker={"size": 9, "color": colors, "line": {"width": 1, "color": "white"}},
        hovertext=[_hover(row, value_label) for _, row in segments.iterrows()], hoverinfo="text", showlegend=False,
        meta={"role": "hover"}))
    if not finite.empty:
        figure.add_trace(go.Scatter(
            x=[None], y=[None], mode="markers", hoverinfo="skip", showlegend=False, meta={"role": "scale"},
            marker={"color": [finite["value"].min(), finite["value"].max()], "colorscale": VALUE_SCALE,
                    "cmin": finite["value"].min(), "cmax": finite["value"].max(), "showscale": True,
                    "colorbar": {"title": {"text": value_label, "side": "right"}}}))
    for state, symbol in END_SYMBOLS.items():
        ended = segments[segments["state"] == state]
        if ended.empty:
            continue
        figure.add_trace(go.Scatter(
            x=ended["stop"], y=[_row_y(row) for row in ended.to_dict("records")], mode="markers",
            name=END_WORDS[state], hoverinfo="skip",
            marker={"symbol": symbol, "size": 12, "color": STATE_COLORS[state], "line": {"width": 1}},
            meta={"role": f"end_{state.lower()}"}))
    members = sorted({int(m) for m in segments["member"]})
    figure.update_layout(
        height=max(260, 60 + 34 * len(members)), margin={"l": 10, "r": 10, "t": 30, "b": 10},
        xaxis={"title": {"text": "PPO update"}}, legend={"orientation": "h", "y": 1.08},
        yaxis={"title": {"text": "member"}, "tickmode": "array", "tickvals": members, "autorange": "reversed"},
    )
    return figure


def schedule_figure(steps: pd.DataFrame, kl_label: str, copies: list[int]) -> go.Figure:
    """The learning rate (top) and the KL coefficient in force (bottom) over the updates, as steps; dotted verticals
    at the updates where the lineage copied another member."""
    figure = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    for row, column, title in ((1, "learning_rate", "learning rate"), (2, "kl", kl_label)):
        figure.add_trace(go.Scatter(x=steps["update"], y=steps[column], mode="lines", line_shape="hv", name=title,
                                    meta={"role": column}), row=row, col=1)
        # From zero: a flat line's autorange is centred on it, and the read is a step's size against the value.
        top = float(steps[column].max()) if not steps.empty else 0.0
        figure.update_yaxes(title_text=title, tickformat=".3g", row=row, col=1,
                            **({"range": [0.0, 1.15 * top]} if top > 0 else {}))
    for update in copies:
        figure.add_vline(x=update, line={"dash": "dot", "color": "#888888", "width": 1})
    figure.update_xaxes(title_text="PPO update", row=2, col=1)
    figure.update_layout(height=420, margin={"l": 10, "r": 10, "t": 30, "b": 10}, showlegend=False)
    return figure


def stitched_figure(curves: pd.DataFrame, judge: str, judge_label: str, copies: list[int]) -> go.Figure:
    """The held-out judge and the proxy (top), and both KLs (bottom), against the update, from one trial's rows;
    dotted verticals where the lineage copied another member."""
    figure = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    names = {**CURVE_NAMES, judge: judge_label}
    rows = {judge: 1, PROXY: 1, HELD_OUT_KL: 2, TRAINING_KL: 2}
    for metric, points in curves.groupby("metric", sort=False):
        evaluated = metric in (judge, HELD_OUT_KL)  # a point per evaluation: markers show how few there are
        figure.add_trace(go.Scatter(x=points["update"], y=points["value"], name=names.get(str(metric), str(metric)),
                                    mode="lines+markers" if evaluated else "lines", meta={"role": str(metric)}),
                         row=rows.get(str(metric), 1), col=1)
    for update in copies:
        figure.add_vline(x=update, line={"dash": "dot", "color": "#888888", "width": 1})
    figure.update_yaxes(title_text="score", row=1, col=1)
    figure.update_yaxes(title_text="KL (nats)", row=2, col=1)
    figure.update_xaxes(title_text="PPO update", row=2, col=1)
    figure.update_layout(height=480, margin={"l": 10, "r": 10, "t": 30, "b": 10},
                         legend={"orientation": "h", "y": 1.08})
    return figure


__all__ = ["lineage_figure", "schedule_figure", "stitched_figure"]
