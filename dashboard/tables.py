"""Display-ready tables (pandas) and their Streamlit column settings, for the pages."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd
import streamlit as st

from dashboard.data import StudyView
from dashboard.frames import filter_states
from dashboard.health import Finding, worst
from dashboard.widgets import number

PARAM_PREFIX = "param:"
DIFFERS_STYLE = "background-color: rgba(255, 193, 7, 0.28)"


def trial_table(view: StudyView, states: Iterable[str]) -> pd.DataFrame:
    """The trial table, only the trials in ``states``."""
    return filter_states(view.trials, states)


def objective_labels(view: StudyView) -> dict[str, str]:
    """Column labels for the objective values: Optuna's metric names if the study set them."""
    if any(not name.startswith("value_") for name in view.objective_names):
        return {name: name for name in view.objective_names}
    if len(view.objective_names) == 1:
        return {view.objective_names[0]: f"objective ({view.directions[0]})"}
    return {name: f"objective {i + 1} ({view.directions[i]})" for i, name in enumerate(view.objective_names)}


def trial_table_config(table: pd.DataFrame, view: StudyView) -> dict[str, Any]:
    config: dict[str, Any] = {
        "number": st.column_config.NumberColumn("trial", format="%d", width="small"),
        "duration_s": st.column_config.NumberColumn("duration", format="%.1f s"),
        "max_kl": st.column_config.NumberColumn("max KL", format="%.3g"),
        "last_kl": st.column_config.NumberColumn("last KL", format="%.3g"),
        "kl_control": st.column_config.TextColumn("KL control"),
        "reason": st.column_config.TextColumn("prune / fail reason", width="large"),
        "updates": st.column_config.NumberColumn("updates", format="%d"),
    }
    for name, label in objective_labels(view).items():
        config[name] = st.column_config.NumberColumn(label, format="%.4g")
    for column in table.columns:
        if column.startswith(PARAM_PREFIX):
            name = column.removeprefix(PARAM_PREFIX)
            if pd.api.types.is_float_dtype(table[column]):
                config[column] = st.column_config.NumberColumn(name, format="%.4g")
            else:
                config[column] = st.column_config.Column(name)
    return config


def best_summary(view: StudyView) -> str:
    """One markdown line: the best trial (or the Pareto front) and its values."""
    if not view.best:
        return "No completed trial yet, so no best trial."
    rows = view.trials.set_index("number")
    if view.multi_objective:
        front = ", ".join(f"#{n}" for n in view.best)
        return f"**Pareto front** ({len(view.best)} trials, {' / '.join(view.directions)}): {front}"
    best = view.best[0]
    name = view.objective_names[0]
    value = rows.loc[best, name]
    params = ", ".join(
        f"{c.removeprefix(PARAM_PREFIX)} = {number(v) if isinstance(v, float) else v}"
        for c, v in rows.loc[best].items() if c.startswith(PARAM_PREFIX) and not pd.isna(v)
    )
    return f"**Best trial #{best}**: {objective_labels(view)[name]} = {number(value)}" + \
        (f" with {params}" if params else "")


def highlight_differences(table: pd.DataFrame) -> Any:
    """A Styler that shades the rows whose values differ between trials."""
    def shade(row: pd.Series) -> list[str]:
        return [DIFFERS_STYLE if row["differs"] else ""] * len(row)

    return table.style.apply(shade, axis=1)


def health_summary(
    view: StudyView, findings: Mapping[int, list[Finding]], numbers: Iterable[int]
) -> pd.DataFrame:
    """One row per trial: its state, worst severity and the signs found."""
    rows = view.trials.set_index("number")
    records = []
    for n in numbers:
        found = findings.get(n, [])
        records.append({
            "trial": n, "state": rows.loc[n, "state"], "health": worst(found),
            "signs": "; ".join(f.sign for f in found), "reason": rows.loc[n, "reason"],
        })
    return pd.DataFrame(records, columns=["trial", "state", "health", "signs", "reason"])
