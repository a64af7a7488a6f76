"""Samples page: what the policies wrote for one evaluation prompt, across trials and over updates."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard.charts import trial_label
from dashboard.frames import number, prompts, sample_updates, samples_at, trial_samples
from dashboard.ui import PageContext, keep_valid, run_page

PROMPT_KEY, UPDATE_KEY, TRIAL_KEY = "samples_prompt", "samples_update", "samples_trial"
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
    st.dataframe(table[["selected", "trial_number", "state", "update", "response", "score", "gold_score"]],
                 hide_index=True, column_config=TEXT_CONFIG, width="stretch")
    st.caption("Each trial's latest generation at or before this update: pruned trials stop early.")


def _over_updates(context: PageContext, samples: pd.DataFrame, prompt_index: int) -> None:
    st.subheader("One trial over the updates")
    states = context.view.states()
    with_samples = sorted(int(n) for n in samples["trial_number"].unique())
    start = next((n for n in context.default_trials(len(with_samples)) if n in with_samples), with_samples[0])
    keep_valid(TRIAL_KEY, with_samples, start)
    trial = st.selectbox("Trial", with_samples, key=TRIAL_KEY, format_func=lambda n: trial_label(n, states[n]))
    for row in trial_samples(samples, trial, prompt_index).itertuples():
        with st.container(border=True):
            st.markdown(f"**Update {row.update}** · episode {row.episode} · proxy score {number(row.score)} · "
                        f"gold score {number(row.gold_score)}")
            st.code(row.response or "(empty response)", language=None, wrap_lines=True)


def render(context: PageContext) -> None:
    samples = context.samples()
    if samples.empty:
        st.info("No sample generations stored for this study (num_sample_generations may be 0).")
        return
    by_index = prompts(samples)
    keep_valid(PROMPT_KEY, list(by_index), next(iter(by_index)))
    prompt_index = st.selectbox("Evaluation prompt", list(by_index), key=PROMPT_KEY,
                                format_func=lambda i: f"{i}: {by_index[i]}")
    _across_trials(context, samples, prompt_index)
    _over_updates(context, samples, prompt_index)


run_page("Samples", render, "What the policy actually writes for the fixed evaluation prompts.")
