"""The study's data shaped for the charts, tables and summaries the pages show: pure pandas, no Streamlit.

The metrics and samples frames come from ``dashboard.study_reader``; the functions here pick, smooth,
align and compare them, and turn a :class:`~dashboard.study_reader.StudyView` into display tables.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from dashboard.health_rules import Finding, HealthContext, worst
from dashboard.study_reader import PARAM_PREFIX, StudyView
from ppo_core.config.estimator_traits import critic_estimators
from ppo_core.metric_names import CRITIC_METRICS, GUARDED_METRICS
from tuner.run.savings import update_savings
from tuner.store.records import METRIC_KEYS
from tuner.study.spec import Objective

DIFFERS_STYLE = "background-color: rgba(255, 193, 7, 0.28)"
# What every table on every page shows where a trial has no value: a setting it does not use (kl_coef on an
# adaptive-KL trial, stored as None), a metric it never reported. One text everywhere: the Study table writes what
# Compare writes, never "None".
MISSING = "—"
# Optuna stores a pruned trial's last reported intermediate value as its value: a partial value, not the objective
# it never reached. Tables keep it apart from complete trials' objective values and mark it with this.
PARTIAL = "partial"
# Settings a page can colour or group trials by, when a study's trials differ in them (a searched estimator).
ESTIMATOR_KEY = "advantage_estimator"  # PPOConfig's field, as stored in each trial's config
GROUPABLE_KEYS = (ESTIMATOR_KEY,)
UNRECORDED = "unrecorded"
# Shown first in metric pickers: the metrics the tuning guidance says to watch.
PREFERRED_METRICS = (
    "objective/kl", "objective/scores", "objective/gold_score", "objective/kl_coef", "objective/entropy",
    "policy/entropy_avg", "loss/value_avg", "loss/policy_avg", "policy/clipfrac_avg", "policy/approxkl_avg",
    "objective/rlhf_reward", "objective/non_score_reward", "objective/response_length",
    "val/explained_variance",
)


def metric_columns(metrics: pd.DataFrame) -> list[str]:
    """The metric names present (with at least one value), the watched ones first."""
    present = [c for c in metrics.columns if c not in METRIC_KEYS and metrics[c].notna().any()]
    preferred = [m for m in PREFERRED_METRICS if m in present]
    return preferred + sorted(c for c in present if c not in preferred)


def has_values(metrics: pd.DataFrame, metric: str) -> bool:
    return metric in metrics.columns and bool(metrics[metric].notna().any())


def ema(values: pd.Series, weight: float) -> pd.Series:
    """Exponential moving average with TensorBoard's meaning of ``weight`` (0: raw, 0.99: very smooth).

    The bias-corrected form keeps the first points at the data instead of pulling them to zero.
    """
    if weight <= 0:
        return values
    return values.ewm(alpha=1.0 - min(weight, 0.999), adjust=True, ignore_na=True).mean()


def series_by_trial(
    metrics: pd.DataFrame, metric: str, x: str, smoothing: float, numbers: Iterable[int] | None = None
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Each trial's finite (x, y) points for a metric, smoothed; trials without a value are left out.

    Numpy arrays rather than frames: charts of hundreds of trials spend their time converting inputs.
    """
    if metric not in metrics.columns or metrics.empty:
        return {}
    wanted = None if numbers is None else set(numbers)
    trials = metrics["trial_number"].to_numpy()
    xs, ys = metrics[x].to_numpy(dtype=float), metrics[metric].to_numpy(dtype=float)
    # Rows are sorted by trial then update, so each trial is one contiguous block.
    starts = np.flatnonzero(np.r_[True, trials[1:] != trials[:-1]])
    ends = np.r_[starts[1:], len(trials)]
    series = {}
    for start, end in zip(starts, ends, strict=True):
        number = int(trials[start])
        if wanted is not None and number not in wanted:
            continue
        y = ys[start:end]
        keep = np.isfinite(y)
        if not keep.any():
            continue
        smoothed = ema(pd.Series(y[keep]), smoothing).to_numpy() if smoothing > 0 else y[keep]
        series[number] = (xs[start:end][keep], smoothed)
    return series


def last_values(metrics: pd.DataFrame, numbers: Sequence[int], names: Sequence[str]) -> pd.DataFrame:
    """The last reported value of each metric per trial: rows are metrics, columns ``#<trial>``."""
    table: dict[str, list[float]] = {}
    for number in numbers:
        rows = metrics[metrics["trial_number"] == number]
        column = []
        for name in names:
            values = rows[name].dropna() if name in rows.columns else pd.Series(dtype=float)
            column.append(float(values.iloc[-1]) if len(values) else math.nan)
        table[f"#{number}"] = column
    return pd.DataFrame(table, index=list(names))


def compare_values(values_by_trial: Mapping[int, Mapping[str, Any]], keys: Iterable[str] | None = None) -> pd.DataFrame:
    """A table of settings (rows) by trial (columns ``#<trial>``) with a ``differs`` column."""
    numbers = list(values_by_trial)
    names = list(keys) if keys is not None else sorted({k for values in values_by_trial.values() for k in values})
    rows = []
    for name in names:
        cells = [values_by_trial[n].get(name) for n in numbers]
        rendered = [_render(cell) for cell in cells]
        rows.append({"setting": name, **{f"#{n}": r for n, r in zip(numbers, rendered, strict=True)},
                     "differs": len(set(rendered)) > 1})
    return pd.DataFrame(rows, columns=["setting", *(f"#{n}" for n in numbers), "differs"])


def _render(value: Any) -> str:
    # Settings are mixed types (floats, ints, None, strings); one text form compares and displays them alike.
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def samples_at(samples: pd.DataFrame, prompt_index: int, update: int) -> pd.DataFrame:
    """Per trial, its generation for one prompt at the latest sampled update at or before ``update``."""
    rows = samples[(samples["prompt_index"] == prompt_index) & (samples["update"] <= update)]
    if rows.empty:
        return rows
    latest = rows.sort_values(["trial_number", "update"]).groupby("trial_number", as_index=False).tail(1)
    return latest.reset_index(drop=True)


def trial_samples(samples: pd.DataFrame, number: int, prompt_index: int) -> pd.DataFrame:
    """One trial's generations for one prompt, in update order."""
    rows = samples[(samples["trial_number"] == number) & (samples["prompt_index"] == prompt_index)]
    return rows.sort_values("update").reset_index(drop=True)


def prompts(samples: pd.DataFrame) -> dict[int, str]:
    """The evaluation prompts by index."""
    if samples.empty:
        return {}
    first = samples.drop_duplicates("prompt_index").sort_values("prompt_index")
    return dict(zip(first["prompt_index"].astype(int), first["prompt"], strict=True))


def sample_updates(samples: pd.DataFrame, numbers: Iterable[int] | None = None) -> list[int]:
    """The updates at which any of the trials (all trials if None) recorded samples."""
    rows = samples if numbers is None else samples[samples["trial_number"].isin(list(numbers))]
    return sorted(int(u) for u in rows["update"].unique())


def matched_updates(samples: pd.DataFrame, numbers: Sequence[int]) -> list[int]:
    """The sample updates that every one of the trials has, so their generations compare like for like."""
    common: set[int] | None = None
    for number in numbers:
        updates = set(samples.loc[samples["trial_number"] == number, "update"].astype(int))
        common = updates if common is None else common & updates
    return sorted(common or ())


def number(value: Any, digits: int = 4) -> str:
    """A score for display: :data:`MISSING` when missing."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return MISSING
    return f"{float(value):.{digits}g}"


def partial_column(name: str) -> str:
    """The trial table's column for the partial values of objective ``name``: ``<name> (partial)``."""
    return f"{name} ({PARTIAL})"


def objective_text(state: str, value: Any) -> str:
    """An objective value for display, marked when it is a pruned trial's partial value: ``0.8125 (partial)``."""
    shown = number(value)
    return shown if state == "COMPLETE" or shown == MISSING else f"{shown} ({PARTIAL})"


def config_groups(view: StudyView, key: str) -> dict[int, str]:
    """Each trial's value of config ``key`` as a group label, or {} when the trials do not differ in it.

    A trial whose config lacks the key (a trial run before the setting existed) is labelled "unrecorded" rather
    than given a default here: the default belongs to ppo_core's config, which the dashboard does not load.
    """
    labels = {n: str(view.configs.get(n, {}).get(key, UNRECORDED)) for n in view.numbers}
    return labels if len(set(labels.values())) > 1 else {}


def grouping_options(view: StudyView) -> list[str]:
    """The config keys a page can colour trials by: those in :data:`GROUPABLE_KEYS` on which the trials differ."""
    return [key for key in GROUPABLE_KEYS if config_groups(view, key)]


def health_contexts(view: StudyView) -> dict[int, HealthContext]:
    """What the health rules need to know of each trial besides its metrics: the study's KL guard, the trial's KL
    target, and the metrics it always reports (a critic-free estimator reports no value loss)."""
    targets = view.kl_targets()
    without_critic = tuple(m for m in GUARDED_METRICS if m not in CRITIC_METRICS)
    contexts = {}
    for number in view.numbers:
        # A config without the field predates the critic-free estimators: its run trained a value network.
        estimator = view.configs.get(number, {}).get(ESTIMATOR_KEY)
        critic = estimator is None or estimator in critic_estimators()
        contexts[number] = HealthContext(view.kl_guard.threshold, view.kl_guard.metric, targets.get(number),
                                         reported=GUARDED_METRICS if critic else without_critic)
    return contexts


LEADING_COLUMNS = ("number", "state")
AFTER_OBJECTIVES = ("feasible", "max_kl", "last_kl", "reason", "updates", "budget_updates", "duration_s")


def trial_table(view: StudyView, states: Iterable[str]) -> pd.DataFrame:
    """The trial table, only the trials in ``states``: the trial, its state, objective value(s), feasibility and
    KL first (what a reader looks for beside the trial), then how it ended, then the parameters. A parameter that
    mixes numbers with "not sampled" is a float column, so one number format covers it.

    A pruned trial's value (its last intermediate value) sits in a column of its own after the objective's,
    :func:`partial_column`, so sorting by the objective ranks complete trials only."""
    wanted = set(states)
    table = view.trials[view.trials["state"].isin(wanted)].reset_index(drop=True).copy()
    objectives: list[str] = []
    for name in view.objective_names:
        objectives.append(name)
        if name not in table.columns:
            continue
        partial = (table["state"] != "COMPLETE") & table[name].notna()
        if partial.any():
            table[partial_column(name)] = table[name].where(partial)
            table[name] = table[name].where(~partial)
            objectives.append(partial_column(name))
    first = [c for c in (*LEADING_COLUMNS, *objectives, *AFTER_OBJECTIVES) if c in table.columns]
    params = [c for c in table.columns if str(c).startswith(PARAM_PREFIX)]
    rest = [c for c in table.columns if c not in first and c not in params]
    table = table[[*first, *rest, *params]].copy()
    for column in params:
        numeric = pd.to_numeric(table[column], errors="coerce")
        if table[column].notna().sum() == numeric.notna().sum():  # numbers and blanks only
            table[column] = numeric.astype(float)
    return table


REDUCED = {"last": "its last value", "mean": "its mean", "max": "its maximum", "min": "its minimum"}


def reduced(objective: Objective) -> str:
    """How an objective reduces its metric, in words: ``mean of the last 2 values``."""
    if objective.reduce == "mean_last_k":
        return f"mean of the last {objective.k} values"
    return REDUCED.get(objective.reduce, objective.reduce)


def objective_labels(view: StudyView) -> dict[str, str]:
    """Column labels for the objective values, told apart from the raw metric they reduce: ``objective:
    eval/gold_score, mean of the last 2 values`` where the tuner stored how; else Optuna's metric names."""
    if len(view.objectives) == len(view.objective_names):
        return {name: f"objective: {objective.metric}, {reduced(objective)}"
                for name, objective in zip(view.objective_names, view.objectives, strict=True)}
    if any(not name.startswith("value_") for name in view.objective_names):
        return {name: name for name in view.objective_names}
    if len(view.objective_names) == 1:
        return {view.objective_names[0]: f"objective ({view.directions[0]})"}
    return {name: f"objective {i + 1} ({view.directions[i]})" for i, name in enumerate(view.objective_names)}


def trial_params(view: StudyView, number: int) -> dict[str, Any]:
    """A trial's searched parameters by name, from the trial table; those it did not sample are left out."""
    row = view.trials[view.trials["number"] == number].iloc[0]
    return {str(c).removeprefix(PARAM_PREFIX): v for c, v in row.items()
            if str(c).startswith(PARAM_PREFIX) and not pd.isna(v)}


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
    figure = view.best_figure
    # The figure the study chose the trial on, as the CLI gives it: a raced winner's mean over its seeds.
    value = number(rows.loc[best, name]) if figure is None else \
        f"{number(figure.value)} ({figure.what})"
    params = ", ".join(
        f"{k} = {number(v) if isinstance(v, float) else v}" for k, v in trial_params(view, best).items()
    )
    return f"**Best trial #{best}**: {objective_labels(view)[name]} = {value}" + \
        (f" with {params}" if params else "")


def savings_summary(view: StudyView) -> str | None:
    """One markdown line: the updates that pruning and the KL guard saved against running every trial to the end;
    None before any completed or pruned trial recorded its planned length."""
    savings = update_savings(view.trials)
    return None if savings is None else f"**Early stopping**: {savings.line().removeprefix('early stopping ')}"


def target_summary(view: StudyView) -> str:
    """One markdown line: the trainer the study targets, whose computation its trials kept, or that it named none."""
    if view.target is None:
        return ("**Target trainer**: none named. `ppo-tune best --format FORMAT` lists what each trainer computes "
                "differently from the winner; name one with `target:` in the study file to tune what it runs.")
    from tuner.exports import TARGETS  # the export tables, read only for the trainer's full name

    trainer = TARGETS[view.target].name if view.target in TARGETS else view.target
    return (f"**Target trainer**: {trainer}. Every trial computed what it computes, so `ppo-tune best "
            f"--format {view.target}` exports the winner exactly; another format lists what will differ.")


def shading_says_something(table: pd.DataFrame) -> bool:
    """Whether shading the differing rows tells them apart: not when none or every row differs."""
    return bool(table["differs"].any()) and not bool(table["differs"].all())


def highlight_differences(table: pd.DataFrame) -> Any:
    """A Styler that shades the rows whose values differ between trials as displayed (4 significant digits, so
    differences below the shown precision are not differences), and none when every row differs."""
    shaded = shading_says_something(table)

    def shade(row: pd.Series) -> list[str]:
        return [DIFFERS_STYLE if shaded and row["differs"] else ""] * len(row)

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
