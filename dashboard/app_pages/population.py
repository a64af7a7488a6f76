"""Population page, for a population study: the lineage tree of its members' segments, and for one lineage (the
winner's, or a member's run so far) its learning rate and KL coefficient over the updates and its stitched curves."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import session
from dashboard.frames import objective_labels
from dashboard.population_charts import lineage_figure, schedule_figure, stitched_figure
from dashboard.population_frames import (
    copy_edges,
    final_segments,
    kl_field,
    lineage_rows,
    schedule_frame,
    segments_frame,
    stitched_curves,
)
from dashboard.ui import PageContext, keep_valid, picked, run_page
from tuner.store.segments import COPIES

LINEAGE_KEY = "population_lineage"


@st.cache_data(ttl=session.TTL_S, max_entries=session.MAX_STUDIES, show_spinner=False)
def _segments(url: str, name: str, token: str) -> pd.DataFrame:
    return segments_frame(session.reader(url, name).current().trials)


def _judge(context: PageContext) -> str:
    """The first objective's metric: the held-out judge the members are ranked on."""
    view = context.view
    return view.objectives[0].metric if view.objectives else view.objective_names[0]


def _pick_lineage(context: PageContext, segments: pd.DataFrame) -> int:
    winner = [n for n in context.view.best if n in set(segments["trial"])]
    options = list(dict.fromkeys([*winner, *final_segments(segments)]))
    by_trial = segments.set_index("trial")

    def label(number: int) -> str:
        row = by_trial.loc[number]
        won = " (the winner)" if number in winner else ""
        return f"#{number}: member {row['member']}, updates 1-{row['stop']}{won}"

    keep_valid(LINEAGE_KEY, options, options[0])
    return picked(st.selectbox("Lineage of", options, key=LINEAGE_KEY, format_func=label,
                               help="The winner (the best feasible member of the last generation that ended), or "
                                    "any member's run so far: its last segment holds its lineage's whole curve."),
                  options[0])


def render(context: PageContext) -> None:
    segments = _segments(context.ref.url, context.ref.name, context.token)
    if segments.empty:
        st.info("This study has no population: its trials are whole runs, not members' segments.")
        return
    judge = _judge(context)
    st.subheader("Lineage tree")
    chosen = _pick_lineage(context, segments)
    chain = lineage_rows(segments, chosen)
    st.plotly_chart(lineage_figure(segments, copy_edges(segments), judge, chain), key="chart_lineage")
    value = objective_labels(context.view)[context.view.objective_names[0]]
    st.caption(f"One row per member: each segment from its first update to its last, coloured by its value ({value}; "
               "grey: none, it did not complete); dotted lines: a member copying a better one's segment, then "
               "mutated; dashed: a member going back to the best earlier segment end of any lineage, its segment "
               "drawn below its row; ✕ pruned, ◆ failed, ▲ running; outlined: the chosen lineage. Hover a "
               "segment's middle for its trial, value and what was mutated.")

    copies = [int(start) for start in chain.loc[chain["origin"].isin(COPIES), "start"]]
    config = context.view.configs.get(chosen, {})
    field = kl_field(config)
    st.subheader("Learning rate and β along the lineage")
    steps = schedule_frame(config, int(chain["stop"].iloc[-1]))
    st.plotly_chart(schedule_figure(steps, f"β ({field})", copies), key="chart_schedule")
    st.caption(f"From trial #{chosen}'s config and its schedules (learning_rate_schedule, kl_coef_schedule): the "
               f"value in force at each update. β is {field}, the KL coefficient in force for its estimator. Dotted: "
               "where the lineage copied another member or went back to an earlier point.")

    st.subheader("Stitched curves")
    curves = stitched_curves(context.metrics(), chosen, judge)
    if curves.empty:
        st.info(f"Trial #{chosen} has stored no updates yet.")
        return
    st.plotly_chart(stitched_figure(curves, judge, f"{judge} (held-out judge)", copies), key="chart_stitched")
    st.caption(f"Trial #{chosen}'s own rows, which begin with a copy of its parent's: the lineage's whole run from "
               f"update 1. Top: {judge} (the held-out judge the members are ranked on) and the proxy the policy "
               "trains on; bottom: KL.")


run_page("Population", render, "A population's members, segment by segment: who copied whom, what each copy "
                               "changed, and the winning lineage's schedule and curves.")
