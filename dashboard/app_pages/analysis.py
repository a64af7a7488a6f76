"""Analysis page: Optuna's own views of the study (optimization history, importances, ..., Pareto front)."""

from __future__ import annotations

import plotly.io as pio
import streamlit as st

from dashboard import session, url_state
from dashboard.optuna_marks import mark_selected
from dashboard.optuna_views import NotDrawable, available_views, figure
from dashboard.ui import PageContext, keep_valid, picked, run_page


@st.cache_data(ttl=session.TTL_S, max_entries=32, show_spinner="Drawing…")
def _figure_json(url: str, name: str, token: str, view: str, objective: int,
                 selected: tuple[int, ...]) -> tuple[str, str]:
    """(figure JSON, "") or ("", why it cannot be drawn). Cached: importances fit a forest on every call."""
    study = session.reader(url, name).current().study
    try:
        drawn = figure(study, view, objective)
    except NotDrawable as reason:
        return "", str(reason)
    return mark_selected(drawn, study, view, selected, objective).to_json(), ""


def render(context: PageContext) -> None:
    view = context.view
    views = available_views(view.multi_objective)
    url_state.restore("analysis_view")
    keep_valid("analysis_view", views, views[0])
    chosen = st.segmented_control("View", views, key="analysis_view") or views[0]
    url_state.keep("analysis_view", views[0])
    objective = 0
    if view.multi_objective and chosen not in ("Pareto front", "Timeline"):
        objective = picked(st.radio("Objective", range(len(view.directions)), horizontal=True,
                                    key="analysis_objective",
                                    format_func=lambda i: f"{view.objective_names[i]} ({view.directions[i]})"), 0)
    drawn, reason = _figure_json(context.ref.url, context.ref.name, context.token, chosen, objective,
                                 tuple(sorted(context.selected)))
    if reason:
        st.info(reason)
    else:
        st.plotly_chart(pio.from_json(drawn), key="chart_analysis")


run_page("Analysis", render, "Optuna's views of the search: what was tried, what mattered, and when.")
