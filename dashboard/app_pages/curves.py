"""Curves page: KL per trial against the blow-up threshold and KL targets, β, reward curves, any metric."""

from __future__ import annotations

import streamlit as st

from dashboard import url_state
from dashboard.charts import X_TITLES, beta_figure, curves_figure, kl_figure
from dashboard.frames import has_values, metric_columns
from dashboard.ui import PageContext, color_by_picker, keep_valid, picked, run_page

PROXY, GOLD = "objective/scores", "objective/gold_score"


def render(context: PageContext) -> None:
    metrics = context.metrics()
    if metrics.empty:
        st.info("No per-update metrics stored for this study yet.")
        return
    left, middle, right, last = st.columns([2, 3, 2, 2])
    for key in ("curves_x", "curves_smoothing", "curves_more"):
        url_state.restore(key)
    keep_valid("curves_x", list(X_TITLES), "update")
    x = picked(left.radio("x axis", list(X_TITLES), format_func=X_TITLES.get, horizontal=True, key="curves_x"),
               "update")
    if not 0.0 <= float(st.session_state.get("curves_smoothing", 0.0)) <= 0.99:
        st.session_state["curves_smoothing"] = 0.0
    st.session_state.setdefault("curves_smoothing", 0.0)
    smoothing = middle.slider("Smoothing (EMA weight)", 0.0, 0.99, step=0.01, key="curves_smoothing",
                              help="0 draws the raw values; 0.9 averages over about the last ten updates.")
    url_state.keep("curves_x", "update")
    url_state.keep("curves_smoothing", 0.0)
    only_selected = right.toggle("Only selected trials", key="curves_only_selected", disabled=not context.selected)
    groups = color_by_picker(context, last, "curves_color_by")
    states = {n: s for n, s in context.view.states().items() if not only_selected or n in context.selected}
    style = context.style(x, smoothing, groups)
    guard, targets = context.view.kl_guard, context.view.kl_targets()

    st.subheader("KL")
    st.plotly_chart(context.figure(kl_figure, states, style, guard.threshold, targets, guard.metric), key="chart_kl")
    st.caption(f"Solid: complete or running; dashed: pruned; dash-dot: failed. Red: the KL guard's blow-up "
               f"threshold ({guard.threshold:g} nats). Thin dotted lines: each adaptive trial's kl_target.")
    adaptive = {n: s for n, s in states.items() if n in targets}
    if adaptive:
        st.plotly_chart(context.figure(beta_figure, adaptive, style), key="chart_beta")
    else:
        st.caption("No trial shown uses the adaptive KL controller, so β stays at each trial's kl_coef.")

    st.subheader("Reward")
    proxy_column, gold_column = st.columns(2)
    proxy_column.plotly_chart(context.figure(curves_figure, PROXY, states, style, "Proxy score (objective/scores)"),
                              key="chart_proxy")
    if has_values(metrics, GOLD):
        gold = context.figure(curves_figure, GOLD, states, style, "Gold score (objective/gold_score)")
        gold_column.plotly_chart(gold, key="chart_gold")
    else:
        gold_column.info("No gold score in this study: only a built-in task reports objective/gold_score.")

    st.subheader("More metrics")
    drawn = {guard.metric, "objective/kl_coef", PROXY, GOLD}
    options = [m for m in metric_columns(metrics) if m not in drawn]
    keep_valid("curves_more", options, [])
    for metric in st.multiselect("Metrics to plot", options, key="curves_more"):
        st.plotly_chart(context.figure(curves_figure, metric, states, style), key=f"chart_{metric}")
    url_state.keep("curves_more")


run_page("Curves", render, "How KL, β and the rewards moved, update by update, in every trial.")
