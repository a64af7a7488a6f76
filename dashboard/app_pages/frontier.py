"""Frontier page: gold and proxy score against KL, per trial and across the study, with Gao et al.'s fit."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import url_state
from dashboard.charts import trial_label
from dashboard.frames import MISSING, number
from dashboard.frontier import (
    FIT_SCOPES,
    FitOutcome,
    FrontierSource,
    final_points,
    fit_gao,
    fit_points,
    frontier_source,
    gold_peaks,
    group_fits,
    headline,
    pareto_front,
    trajectories,
)
from dashboard.frontier_charts import frontier_figure, trajectory_figure
from dashboard.ui import PageContext, color_by_picker, keep_valid, picked, run_page, show_table

TRIALS_KEY, SCOPE_KEY = "frontier_trials", "frontier_fit_scope"
DEFAULT_PATHS = 4  # trials drawn along their run at first: more tangle into one another
FRONT_CONFIG = {
    "trial": st.column_config.NumberColumn("trial", format="%d", width="small"),
    "kl": st.column_config.NumberColumn("KL", format="%.3g"),
    "proxy": st.column_config.NumberColumn("proxy", format="%.4g"),
    "update": st.column_config.NumberColumn("update", format="%d"),
}


@st.cache_data(ttl=120, max_entries=8, show_spinner=False)
def _frames(url: str, name: str, token: str, _context: PageContext) -> tuple[FrontierSource, pd.DataFrame]:
    """The source and the trajectories, once per study change (the study is keyed by url, name and token)."""
    metrics = _context.metrics()
    source = frontier_source(metrics)
    return source, trajectories(metrics, source)


def _fit_summary(outcome: FitOutcome, source: FrontierSource, scope: str) -> None:
    fit = outcome.fit
    if fit is None:
        st.info(f"No fit of Gao et al.'s form: {outcome.reason}")
        return
    lead = headline(fit)
    columns = st.columns(5)
    columns[0].metric(lead.label, lead.value or MISSING,
                      help="KL* = d*², where the fitted gold score R(d) peaks, d = sqrt(KL); headlined only inside "
                           "the measured KL range or a quarter past its top.")
    columns[1].metric("Fitted gold at KL*", number(fit.gold_star) if fit.supported else MISSING)
    columns[2].metric("α", f"{fit.alpha:.3g}")
    columns[3].metric("β", f"{fit.beta:.3g}")
    columns[4].metric("r²", f"{fit.r2:.2f}", help=f"{fit.n} (sqrt KL, gold) points, {FIT_SCOPES[scope].lower()}")
    where = "held-out evaluation" if source.kind == "eval" else "training rollout"
    (st.caption if fit.supported else st.warning)(f"{lead.words[0].upper()}{lead.words[1:]}.")
    st.caption(
        f"R(d) = r0 + d(α − β log d) with r0 = {fit.r0:.3g}, fitted by least squares to {fit.n} {where} points "
        f"({FIT_SCOPES[scope].lower()}) with KL from {fit.kl_low:.3g} to {fit.kl_high:.3g} nats (summed over a "
        "response, the units of kl_target), drawn a little past them. A suggestion comes from this study's task, "
        "model and budget: re-check it when any of them changes."
    )


def _across_the_study(context: PageContext, source: FrontierSource, paths: pd.DataFrame,
                      groups: dict[int, str]) -> None:
    st.subheader("Across the study")
    states = context.view.states()
    points = final_points(paths, states)
    front = pareto_front(points)
    outcome, scope, chosen = None, "all", paths
    if source.has_gold:
        url_state.restore(SCOPE_KEY)
        keep_valid(SCOPE_KEY, list(FIT_SCOPES), "all")
        scope = picked(st.radio("Fit to", list(FIT_SCOPES), format_func=FIT_SCOPES.get, horizontal=True,
                                key=SCOPE_KEY, help="Pruned trials often ran furthest in KL, where gold turns down: "
                                                    "they carry the peak."), scope)
        url_state.keep(SCOPE_KEY, "all")
        chosen = fit_points(paths, states, scope)
        outcome = fit_gao(chosen["sqrt_kl"], chosen["gold"])
    y_title = "gold score" if source.has_gold else "proxy score"
    figure = frontier_figure(points, front, outcome.fit if outcome else None, y_title, groups,
                             context.view.upper_limit(source.kl))
    st.plotly_chart(figure, key="chart_frontier")
    marks = ("shapes: ● complete, ✕ pruned, ◆ failed, ▲ running" if groups
             else "colours: green complete, orange pruned, red failed, blue running")
    st.caption(f"Each trial's last measured point ({marks}). Black steps: the Pareto front of the complete trials "
               "(no other complete trial has more score for less KL).")
    if outcome is not None:
        _fit_summary(outcome, source, scope)
        if groups:
            show_table(group_fits(chosen, groups), hide_index=True, width="stretch")
            st.caption("The same fit within each group: a group with few points or no turn-down gets no KL*.")
    if not front.empty:
        st.markdown(f"**On the front** ({len(front)} trial{'s' if len(front) != 1 else ''})")
        columns = ["trial", "update", "kl", "y", *(["proxy"] if source.has_gold else [])]
        # The score at the trial's last point, not its objective (the study's reduction of it, on the Study page):
        # the two sat side by side without a word (issue 28, point 6).
        at = "last evaluation" if source.kind == "eval" else "last update"
        config = FRONT_CONFIG | {"y": st.column_config.NumberColumn(
            f"{y_title} at its {at}", format="%.4g",
            help=f"The {y_title} this trial's last point has on the chart: not its objective value, which the "
                 "study file may reduce over several evaluations (the Study page shows it)")}
        show_table(front[columns], hide_index=True, column_config=config, width="stretch")


def _per_trial(context: PageContext, source: FrontierSource, paths: pd.DataFrame, groups: dict[int, str]) -> None:
    st.subheader("Along each run")
    states = context.view.states()
    with_paths = sorted({int(t) for t in paths["trial"]})
    default = [n for n in context.default_trials(len(with_paths)) if n in with_paths][:DEFAULT_PATHS]
    keep_valid(TRIALS_KEY, with_paths, default)
    chosen = st.multiselect("Trials", with_paths, key=TRIALS_KEY, format_func=lambda n: trial_label(n, states[n]))
    if not chosen:
        st.info("Pick trials to draw their path in KL.")
        return
    rows = paths[paths["trial"].isin(chosen)]
    st.plotly_chart(trajectory_figure(rows, gold_peaks(rows), states, groups), key="chart_trajectories")
    if source.has_gold:
        st.caption("Solid: gold score (left axis); dotted: proxy score (right axis); ★: where each trial's gold "
                   "peaked. A proxy still rising past gold's peak is over-optimisation.")
    else:
        st.caption("The proxy score along each run: without a gold score, over-optimisation cannot be told apart "
                   "from learning.")


def render(context: PageContext) -> None:
    source, paths = _frames(context.ref.url, context.ref.name, context.token, context)
    if paths.empty:
        st.info("No KL recorded for this study yet (objective/kl or eval/kl).")
        return
    (st.caption if source.has_gold else st.warning)(source.note)
    groups = color_by_picker(context, st, "frontier_color_by")
    _across_the_study(context, source, paths, groups)
    _per_trial(context, source, paths, groups)


run_page("Frontier", render, "Reward against KL: where more KL stops buying gold score, and the kl_target it "
                             "suggests (Gao et al., 2023).")
