"""Frontier page: gold and proxy score against KL, per trial and across the study, and where the study's gold
peaks (the tuner's own reading of it), where the peak stands clear of the runs' noise."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import url_state
from dashboard.charts import trial_label
from dashboard.frames import MISSING, number
from dashboard.frontier_charts import frontier_figure, trajectory_figure
from dashboard.frontier_reading import (
    FIT_SCOPES,
    final_points,
    fit_points,
    gold_peaks,
    group_peaks,
    headline,
    pareto_front,
)
from dashboard.ui import PageContext, color_by_picker, keep_valid, picked, run_page, show_table
from tuner.search.frontier_peak import kl_range
from tuner.search.frontier_points import FrontierSource, frontier_source, trajectories
from tuner.search.peak_reading import CLEAR_MULTIPLE, PeakReading, read_peak

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


@st.cache_data(ttl=120, max_entries=16, show_spinner=False)
def _peaks(url: str, name: str, token: str, scope: str, groups: dict[int, str],
           _chosen: pd.DataFrame) -> tuple[PeakReading, pd.DataFrame | None]:
    """Where gold peaks over the chosen points, and within each group, once per study change, scope and grouping
    (``_chosen`` follows from those): a reading resamples the study (tuner.search.frontier_peak), which was most of
    a rerun's time."""
    return read_peak(_chosen), (group_peaks(_chosen, groups) if groups else None)


def _peak_summary(reading: PeakReading, source: FrontierSource, scope: str) -> None:
    lead, peak, found = headline(reading), reading.peak, reading.found
    columns = st.columns(4)
    columns[0].metric(lead.label, lead.value or MISSING,
                      help="Where the study's gold score, smoothed over every evaluation of every trial, is highest "
                           "(tuner.search.frontier_peak). Named a peak only where the curve turns down inside the "
                           f"measured KL range, and rises to it and falls after it by more than {CLEAR_MULTIPLE:g}x "
                           "the runs' noise each.")
    columns[1].metric("Smoothed gold there", number(peak.value) if found else MISSING)
    columns[2].metric("80% interval", kl_range(peak.kl_low, peak.kl_high) if found else MISSING,
                      help="The peaks read from studies resampled from this one's trials, drawn with replacement.")
    columns[3].metric("Resamples that turn",
                      f"{peak.inside:.0%}" if reading.status in ("peak", "rising", "falling") else MISSING,
                      help="The share of resampled studies whose curve turns down inside their own KL range.")
    where = "held-out evaluation" if source.kind == "eval" else "training rollout"
    (st.caption if found else st.warning)(f"{lead.words[0].upper()}{lead.words[1:]}.")
    if peak.status != "none":
        st.caption(
            f"Against the runs' noise: {reading.clearance.numbers()}. The rise is the smoothed gold's best less its "
            "value at the lowest KL read, the fall its best less its value at the highest; the noise is the SD of "
            "one run's gold, from each evaluation against the nearest one (in KL) of another trial. A peak is "
            f"named where the rise and the fall each exceed {CLEAR_MULTIPLE:g}x the noise."
        )
        st.caption(
            f"Gold against ln KL, smoothed locally over {peak.points} {where} points of {peak.trials} trials "
            f"({FIT_SCOPES[scope].lower()}), KL from {peak.kl_min:.3g} to {peak.kl_max:.3g} nats (summed over a "
            "response, the units of kl_target). A suggestion comes from this study's task, model and budget: "
            "re-check it when any of them changes."
        )


def _across_the_study(context: PageContext, source: FrontierSource, paths: pd.DataFrame,
                      groups: dict[int, str]) -> None:
    st.subheader("Across the study")
    states = context.view.states()
    points = final_points(paths, states)
    front = pareto_front(points)
    reading, by_group, scope = None, None, "all"
    if source.has_gold:
        url_state.restore(SCOPE_KEY)
        keep_valid(SCOPE_KEY, list(FIT_SCOPES), "all")
        scope = picked(st.radio("Read the peak from", list(FIT_SCOPES), format_func=FIT_SCOPES.get, horizontal=True,
                                key=SCOPE_KEY, help="Pruned trials often ran furthest in KL, where gold turns down: "
                                                    "they carry the peak."), scope)
        url_state.keep(SCOPE_KEY, "all")
        reading, by_group = _peaks(context.ref.url, context.ref.name, context.token, scope, groups,
                                   fit_points(paths, states, scope))
    y_title = source.gold_label if source.has_gold else "proxy score"
    figure = frontier_figure(points, front, reading, y_title, groups,
                             context.view.upper_limit(source.kl))
    st.plotly_chart(figure, key="chart_frontier")
    marks = ("shapes: ● complete, ✕ pruned, ◆ failed, ▲ running" if groups
             else "colours: green complete, orange pruned, red failed, blue running")
    st.caption(f"Each trial's last measured point ({marks}). Black steps: the Pareto front of the complete trials "
               "(no other complete trial has more score for less KL).")
    if reading is not None:
        _peak_summary(reading, source, scope)
        if by_group is not None:
            show_table(by_group, hide_index=True, width="stretch")
            st.caption("The same reading within each group: a group with few points, or no turn-down clear of its "
                       "runs' noise, gets no peak.")
    if not front.empty:
        st.markdown(f"**On the front** ({len(front)} trial{'s' if len(front) != 1 else ''})")
        columns = ["trial", "update", "kl", "y", *(["proxy"] if source.has_gold else [])]
        # The score at the trial's last point, not its objective (the study's reduction of it, on the Study page):
        # the column's title and help say which, so a reader does not take one for the other.
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


run_page("Frontier", render, "Reward against KL: where more KL stops buying gold score (Gao et al., 2023), and "
                             "the kl_target that suggests.")
