"""Samples page: what the policies wrote for one evaluation prompt, across trials and over updates."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard.charts import trial_label
from dashboard.frames import ESTIMATOR_KEY, config_groups, prompts, sample_updates, samples_at
from dashboard.sample_grid import ROW_KEYS, grid_html, prompt_rows, row_key, sample_grid
from dashboard.ui import PageContext, keep_valid, picked, run_page, show_table

PROMPT_KEY, UPDATE_KEY = "samples_prompt", "samples_update"
COLUMNS_KEY, ROWS_KEY, RANGE_KEY = "samples_columns", "samples_rows_by", "samples_row_range"
FOLLOWED_KEY = "_samples_columns_follow"  # the sidebar selection the columns were last set from
MAX_COLUMNS, DEFAULT_COLUMNS = 6, 3
MAX_ROWS = 12  # rows drawn at once; a range picker reaches the rest
TEXT_CONFIG = {
    "trial_number": st.column_config.NumberColumn("trial", format="%d", width="small"),
    "selected": st.column_config.CheckboxColumn("★", width="small"),
    "response": st.column_config.TextColumn("response", width="large"),
    "score": st.column_config.NumberColumn("proxy score", format="%.3f"),
    "gold_score": st.column_config.NumberColumn("gold score", format="%.3f"),
}


def _across_trials(context: PageContext, samples: pd.DataFrame, prompt_index: int) -> None:
    updates = sample_updates(samples)
    keep_valid(UPDATE_KEY, updates, updates[-1])
    update = st.select_slider("At update", updates, key=UPDATE_KEY) if len(updates) > 1 else updates[0]
    st.subheader(f"Every trial's answer at update {update}")
    table = samples_at(samples, prompt_index, update)
    states = context.view.states()
    table = table.assign(
        selected=table["trial_number"].isin(context.selected),
        state=table["trial_number"].map(states),
    ).sort_values(["selected", "score"], ascending=[False, False])
    show_table(table[["selected", "trial_number", "state", "update", "response", "score", "gold_score"]],
               hide_index=True, column_config=TEXT_CONFIG, width="stretch")
    st.caption("Each trial's latest generation at or before this update: pruned trials stop early.")


def _columns(context: PageContext, samples: pd.DataFrame) -> list[int]:
    states = context.view.states()
    with_samples = sorted(int(n) for n in samples["trial_number"].unique())
    selected = [n for n in sorted(context.selected) if n in with_samples]
    default = selected[:MAX_COLUMNS] if len(selected) >= 2 else \
        [n for n in context.default_trials(len(with_samples)) if n in with_samples][:DEFAULT_COLUMNS]
    # The columns follow the sidebar's selection each time it changes; in between they are the user's own.
    if len(selected) >= 2 and st.session_state.get(FOLLOWED_KEY) != selected:
        st.session_state[FOLLOWED_KEY] = selected
        st.session_state[COLUMNS_KEY] = selected[:MAX_COLUMNS]
    keep_valid(COLUMNS_KEY, with_samples, default)
    return st.multiselect(f"Trials as columns (up to {MAX_COLUMNS})", with_samples, key=COLUMNS_KEY,
                          max_selections=MAX_COLUMNS, format_func=lambda n: trial_label(n, states[n]),
                          help="The sidebar's selected trials when 2 to 6 are selected, else the best ones.")


def _grid(context: PageContext, samples: pd.DataFrame, prompt_index: int) -> None:
    st.subheader("Side by side over the run")
    trials = _columns(context, samples)
    if not trials:
        st.info("Pick trials to lay out as columns.")
        return
    rows = prompt_rows(samples, prompt_index, trials)
    left, right = st.columns([1, 3])
    keep_valid(ROWS_KEY, list(ROW_KEYS), row_key(rows))
    key = picked(left.radio("Rows by", ROW_KEYS, key=ROWS_KEY, horizontal=True,
                            help="Episode lines up trials whose rollout batches differ (their k-th samples share a "
                                 "row)."), ROW_KEYS[0])
    grid = sample_grid(rows, trials, key)
    points = list(grid.index)
    if len(points) > MAX_ROWS:
        kept = st.session_state.get(RANGE_KEY)
        if kept is not None and not (isinstance(kept, (tuple, list)) and len(kept) == 2 and set(kept) <= set(points)):
            del st.session_state[RANGE_KEY]  # other trials or the other row key: start over
        # The default must be passed as a pair, not set in the session state: the pair makes the slider a range.
        low, high = right.select_slider(f"{key.capitalize()}s shown", points, value=(points[-MAX_ROWS], points[-1]),
                                        key=RANGE_KEY)
        grid = grid.loc[low:high]
    states = context.view.states()
    groups = config_groups(context.view, ESTIMATOR_KEY)
    labels = {n: trial_label(n, states[n]) + (f" ({groups[n]})" if n in groups else "") for n in trials}
    st.html(grid_html(grid, labels))
    st.caption(f"Marked: the words that differ from the first column's text ({labels[trials[0]]}) in the same "
               f"row. Under each text: the proxy and gold scores. {len(points)} sampling points in all.")


def render(context: PageContext) -> None:
    samples = context.samples()
    if samples.empty:
        st.info("No sample generations stored for this study (num_sample_generations may be 0).")
        return
    by_index = prompts(samples)
    keep_valid(PROMPT_KEY, list(by_index), next(iter(by_index)))
    prompt_index = picked(st.selectbox("Evaluation prompt", list(by_index), key=PROMPT_KEY,
                                       format_func=lambda i: f"{i}: {by_index[i]}"), next(iter(by_index)))
    _grid(context, samples, prompt_index)
    _across_trials(context, samples, prompt_index)


run_page("Samples", render, "What the policy actually writes for the fixed evaluation prompts.")
