"""Study page: trial counts by state, the best trial, searched ranges the best trials crowd against (edge
findings), and the trial table.

Rows selected in the table become the selection every page highlights.
"""

from __future__ import annotations

import streamlit as st

from dashboard import session
from dashboard.frames import best_summary, trial_table
from dashboard.ui import PageContext, escape_markdown, keep_valid, run_page, trial_table_config

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


def render(context: PageContext) -> None:
    view = context.view
    columns = st.columns(1 + len(view.counts))
    columns[0].metric("Trials", len(view.numbers))
    for column, (name, count) in zip(columns[1:], view.counts.items(), strict=True):
        column.metric(STATE_LABELS.get(name, name.capitalize()), count)
    st.markdown(best_summary(view))
    for finding in view.edge_findings:
        st.warning(f"**Edge of the search space**: {escape_markdown(finding.message)}")

    present = [s for s, count in view.counts.items() if count]
    keep_valid(FILTER_KEY, present, present)
    states = st.multiselect("Show states", present, key=FILTER_KEY)
    table = trial_table(view, states)
    numbers = [int(n) for n in table["number"]]
    st.session_state[SHOWN_KEY] = numbers
    # Draw the shared selection in the table, whichever page or widget made it.
    positions = [i for i, n in enumerate(numbers) if n in context.selected]
    st.session_state[TABLE_KEY] = {"selection": {"rows": positions, "columns": []}}
    st.dataframe(
        table, key=TABLE_KEY, on_select=_on_table_select, selection_mode="multi-row", hide_index=True,
        column_config=trial_table_config(table, view), width="stretch", height=_height(len(table)),
    )
    st.caption("Select rows to highlight those trials on every page. Click a column header to sort.")


run_page("Study", render)
