"""Study page: trial counts by state, the best trial, searched ranges the best trials crowd against (edge
findings), the validated results where ``ppo-tune validate`` reran the best configurations, and the trial table.

Rows selected in the table become the selection every page highlights.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import session
from dashboard.frames import best_summary, objective_labels, savings_summary, target_summary, trial_table
from dashboard.study_reader import StudyRef
from dashboard.ui import PageContext, escape_markdown, keep_valid, run_page, show_table, trial_table_config
from dashboard.validation_view import lengths_frame, validation_caption, validation_figure, validation_frame
from tuner.production.horizon import HELD_WITHIN
from tuner.production.validation import validation_study_name
from tuner.study.judge_notice import no_judge_notice

TABLE_KEY = "trial_table"
SHOWN_KEY = "_trial_table_numbers"  # the trial number of each table row, for the selection callback
FILTER_KEY = "study_state_filter"
STATE_LABELS = {"COMPLETE": "Complete", "PRUNED": "Pruned", "FAIL": "Failed", "RUNNING": "Running",
                "WAITING": "Waiting"}


def _on_table_select() -> None:
    rows = st.session_state[TABLE_KEY]["selection"]["rows"]
    shown = st.session_state.get(SHOWN_KEY, [])
    session.select_trials(session.selection_from_table(rows, shown, session.selected_trials()))


def _height(rows: int) -> int:
    # About 18 rows before the table scrolls (35 px a row plus the header).
    return min(rows + 1, 19) * 35 + 3


@st.cache_data(ttl=session.TTL_S, max_entries=session.MAX_STUDIES, show_spinner=False)
def _validated(url: str, name: str, token: str, validation_token: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    # Keyed by both studies' change tokens: runs finishing in the validation study change only its token.
    study = session.reader(url, name).current().study
    validation = session.reader(url, validation_study_name(name)).current().study
    return validation_frame(study, validation), lengths_frame(study, validation)


def _validation(context: PageContext) -> None:
    ref = StudyRef(context.ref.url, validation_study_name(context.ref.name))
    # The studies the sidebar found: a study never validated has no validation study among them.
    if ref not in st.session_state.get(session.REFS_KEY, {}).values():
        return
    frame, lengths = _validated(ref.url, context.ref.name, context.token, session.refresh(ref))
    if frame.empty and lengths.empty:
        return
    if not frame.empty:
        st.subheader("Validated on fresh seeds")
        objective = objective_labels(context.view)[context.view.objective_names[0]]
        show_table(frame, hide_index=True, width="stretch", column_config={
            "trial": st.column_config.NumberColumn("trial", format="%d", width="small"),
            "tuning_value": st.column_config.NumberColumn("tuning value", format="%.4g",
                                                          help=f"{objective} on the seed the study tuned with"),
            "tuning_rank": st.column_config.NumberColumn("tuning rank", format="#%d"),
            "mean": st.column_config.NumberColumn("validated mean", format="%.4g"),
            "ci_low": st.column_config.NumberColumn("95% CI low", format="%.4g"),
            "ci_high": st.column_config.NumberColumn("95% CI high", format="%.4g"),
            "n": st.column_config.NumberColumn("n", format="%d", help="completed runs"),
            "failed": st.column_config.NumberColumn("failed", format="%d"),
            "pending": st.column_config.NumberColumn("pending", format="%d", help="runs queued or running"),
            "feasible_runs": st.column_config.NumberColumn("feasible", format="%d",
                                                           help="completed runs that kept the study's constraints"),
            "validated_rank": st.column_config.NumberColumn("validated rank", format="#%d"),
            "ranking": st.column_config.TextColumn("ranking", width="medium"),
        })
        st.caption(validation_caption(frame) + " Ranks are among the validated configurations; the validated mean is "
                   "the number to trust, the tuning value won on one seed.")
        st.plotly_chart(validation_figure(frame, objective), key="validation_chart", width="stretch")
    if lengths.empty:
        return
    st.subheader("Validated at a production length or policy")
    show_table(lengths, hide_index=True, width="stretch", column_config={
        "trial": st.column_config.NumberColumn("trial", format="%d", width="small"),
        "total_episodes": st.column_config.NumberColumn("episodes", format="%d",
                                                        help="the production run's total_episodes"),
        "policy_model": st.column_config.TextColumn("policy", help="the production run's policy (ppo-tune validate "
                                                                   "--policy-model PATH); empty: the tuned one"),
        "rule": st.column_config.TextColumn("rule", help="how the tuned config was carried there (ppo-tune validate "
                                                         "--total-episodes N --rule R; kl_pilot: the learning rate "
                                                         "rescaled from a pilot on the policy)"),
        "mean": st.column_config.NumberColumn("validated mean", format="%.4g"),
        "ci_low": st.column_config.NumberColumn("95% CI low", format="%.4g"),
        "ci_high": st.column_config.NumberColumn("95% CI high", format="%.4g"),
        "n": st.column_config.NumberColumn("n", format="%d", help="completed runs"),
        "own_episodes": st.column_config.NumberColumn("tuned episodes", format="%d"),
        "own_value": st.column_config.NumberColumn("as tuned", format="%.4g",
                                                   help="at the tuned length on the tuned policy: validated mean "
                                                        "there, else the tuning value"),
        "change": st.column_config.NumberColumn("change", format="percent"),
        "held": st.column_config.TextColumn("held", help=f"within {HELD_WITHIN:.0%} of the value as tuned"),
    })


def render(context: PageContext) -> None:
    view = context.view
    columns = st.columns(1 + len(view.counts))
    columns[0].metric("Trials", len(view.numbers))
    for column, (name, count) in zip(columns[1:], view.counts.items(), strict=True):
        column.metric(STATE_LABELS.get(name, name.capitalize()), count)
    st.markdown(best_summary(view))
    savings = savings_summary(view)
    if savings is not None:
        st.markdown(savings)
    st.markdown(target_summary(view))
    if view.aim is not None:
        st.markdown(f"**Frontier-guided search**: {escape_markdown(view.aim)}.")
    for finding in view.edge_findings:
        st.warning(f"**Edge of the search space**: {escape_markdown(finding.message)}")
    judgeless = no_judge_notice(view.spec.objectives, view.spec.base) if view.spec.mapping is not None else None
    if judgeless is not None:
        st.warning(f"**No held-out judge**: {escape_markdown(judgeless.split(': ', 1)[1])}")
    for inert in session.inert(context.ref.url, context.ref.name, context.token):
        st.warning(f"**A searched knob that did nothing**: {escape_markdown(inert.words())}")
    _validation(context)

    present = [s for s, count in view.counts.items() if count]
    keep_valid(FILTER_KEY, present, present)
    states = st.multiselect("Show states", present, key=FILTER_KEY)
    table = trial_table(view, states)
    numbers = [int(n) for n in table["number"]]
    st.session_state[SHOWN_KEY] = numbers
    # Draw the shared selection in the table, whichever page or widget made it.
    positions = [i for i, n in enumerate(numbers) if n in context.selected]
    st.session_state[TABLE_KEY] = {"selection": {"rows": positions, "columns": []}}
    show_table(
        table, key=TABLE_KEY, on_select=_on_table_select, selection_mode="multi-row", hide_index=True,
        column_config=trial_table_config(table, view), width="stretch", height=_height(len(table)),
    )
    st.caption("Select rows to highlight those trials on every page. Click a column header to sort.")


run_page("Study", render)
