"""Compare page: two to four trials side by side: settings, curves, final metrics and generations."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import url_state
from dashboard.charts import CurveStyle, curves_figure, kl_figure, trial_label
from dashboard.frames import (
    compare_values,
    highlight_differences,
    last_values,
    matched_updates,
    metric_columns,
    number,
    objective_labels,
    objective_text,
    prompts,
    sample_updates,
    samples_at,
    trial_params,
)
from dashboard.study_reader import PARAM_PREFIX
from dashboard.ui import PageContext, escape_markdown, keep_valid, picked, run_page, show_table

TRIALS_KEY = "compare_trials"
FINAL_METRICS = ("objective/kl", "objective/scores", "objective/gold_score", "objective/kl_coef",
                 "objective/entropy", "loss/value_avg", "policy/clipfrac_avg", "policy/approxkl_avg",
                 "objective/response_length")


def _settings(context: PageContext, chosen: list[int]) -> None:
    st.subheader("Parameters")
    columns = context.view.trials.columns
    searched = [str(c).removeprefix(PARAM_PREFIX) for c in columns if str(c).startswith(PARAM_PREFIX)]
    params = {n: trial_params(context.view, n) for n in chosen}
    table = compare_values(params, searched)
    show_table(highlight_differences(table), hide_index=True, width="stretch")
    if len(table) > 1 and table["differs"].all():
        st.caption("Every parameter differs between these trials (at the precision shown), so no row is shaded.")
    configs = compare_values({n: context.view.configs.get(n, {}) for n in chosen})
    with st.expander(f"Full configs ({int(configs['differs'].sum())} settings differ)"):
        only_differing = st.toggle("Only the settings that differ", value=True, key="compare_only_differing")
        shown = configs[configs["differs"]] if only_differing else configs
        show_table(highlight_differences(shown), hide_index=True, width="stretch")


def _curves(context: PageContext, chosen: list[int], metrics: pd.DataFrame) -> None:
    st.subheader("Curves")
    states = {n: s for n, s in context.view.states().items() if n in chosen}
    options = metric_columns(metrics)
    if not options:
        st.info("No per-update metrics stored for these trials.")
        return
    guard = context.view.kl_guard
    defaults = [guard.metric if guard.metric in options else options[0],
                "objective/gold_score" if "objective/gold_score" in options else "objective/scores"]
    style = CurveStyle(x="update")  # every compared trial at full strength
    for column, default, key in zip(st.columns(2), defaults, ("compare_metric_left", "compare_metric_right"),
                                    strict=True):
        keep_valid(key, options, default if default in options else options[0])
        metric = picked(column.selectbox("Metric", options, key=key), options[0])
        if metric == guard.metric:
            figure = kl_figure(metrics, states, style, guard.threshold, context.view.kl_targets(), metric)
        else:
            figure = curves_figure(metrics, metric, states, style)
        column.plotly_chart(figure, key=f"chart_{key}")


def _final(context: PageContext, chosen: list[int], metrics: pd.DataFrame) -> None:
    st.subheader("Final metrics")
    rows = context.view.trials.set_index("number")
    names = [m for m in FINAL_METRICS if m in metrics.columns and metrics[m].notna().any()]
    table = last_values(metrics, chosen, names).map(number)
    labels = objective_labels(context.view)
    header = pd.DataFrame(
        {f"#{n}": [rows.loc[n, "state"], str(rows.loc[n, "updates"]),
                   *(objective_text(rows.loc[n, "state"], rows.loc[n, name]) for name in context.view.objective_names)]
         for n in chosen},
        index=["state", "updates", *(labels[name] for name in context.view.objective_names)],
    )
    show_table(pd.concat([header, table]), width="stretch")
    caption = "Metrics are each trial's last reported update."
    if any(rows.loc[n, "state"] != "COMPLETE" for n in chosen):
        caption += (" A value marked (partial) is a pruned trial's last reported one, not the objective it never "
                    "reached.")
    st.caption(caption)



def _generations(context: PageContext, chosen: list[int], samples: pd.DataFrame) -> None:
    st.subheader("Generations")
    if samples.empty:
        st.info("No sample generations stored for these trials.")
        return
    # Every update any of them sampled, so the slider reaches each trial's own last one (a pruned trial's stops
    # early); each trial shows its latest generation at or before the chosen update.
    updates = sample_updates(samples, chosen)
    last = {n: int(samples.loc[samples["trial_number"] == n, "update"].max()) for n in chosen
            if (samples["trial_number"] == n).any()}
    # One slider per set of trials, so choosing other trials starts again at their end.
    key = "compare_update_" + "_".join(str(n) for n in chosen)
    keep_valid(key, updates, updates[-1])
    update = st.select_slider("At update", updates, key=key) if len(updates) > 1 else updates[0]
    if not matched_updates(samples, chosen):
        st.caption("These trials share no sampled update; each shows its latest generation at or before this one.")
    states = context.view.states()
    for index, prompt in prompts(samples).items():
        st.markdown(f"**Prompt {index}:** {escape_markdown(prompt)}")
        answers = samples_at(samples, index, update).set_index("trial_number")
        for column, n in zip(st.columns(len(chosen)), chosen, strict=True):
            column.markdown(f"**{trial_label(n, states[n])}**")
            if n not in answers.index:
                column.caption("no generation by this update")
                continue
            answer = answers.loc[n]
            shown = int(answer["update"])
            its_last = " (its last)" if shown == last.get(n) and update > shown else ""
            column.code(answer["response"] or "(empty response)", language=None, wrap_lines=True)
            column.caption(f"update {shown}{its_last} · proxy {number(answer['score'])} · "
                           f"gold {number(answer['gold_score'])}")


def render(context: PageContext) -> None:
    view = context.view
    states = view.states()
    url_state.restore(TRIALS_KEY)
    keep_valid(TRIALS_KEY, view.numbers, context.default_trials(min(4, max(2, len(context.selected)))))
    chosen = st.multiselect("Trials to compare (2–4)", view.numbers, key=TRIALS_KEY, max_selections=4,
                            format_func=lambda n: trial_label(n, states[n]))
    url_state.keep(TRIALS_KEY)
    if len(chosen) < 2:
        st.info("Pick at least two trials to compare.")
        return
    trials = list(chosen)
    metrics = context.metrics()
    metrics = metrics[metrics["trial_number"].isin(trials)] if not metrics.empty else metrics
    samples = context.samples()
    samples = samples[samples["trial_number"].isin(trials)] if not samples.empty else samples
    _settings(context, trials)
    _curves(context, trials, metrics)
    _final(context, trials, metrics)
    _generations(context, trials, samples)


run_page("Compare", render, "Two to four trials side by side; rows that differ are shaded.")
