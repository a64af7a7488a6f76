"""Validated results for the Study page: each configuration ``ppo-tune validate`` reran on fresh seeds, its mean and
95% interval beside the value it was tuned to, and how its rank moved from tuning to validation. Pure pandas and
plotly over the two studies (the tuned one and ``<name>:validation``, see tuner.production.validation); no Streamlit.

A winner of the tuning is partly a winner of its seed: the validated mean is the number to trust, and a change of
rank says how much the tuning's order was luck.
"""

from __future__ import annotations

import optuna
import pandas as pd
import plotly.graph_objects as go
from optuna.study import StudyDirection

from tuner.production.carry import lengths_validated
from tuner.production.validation import validation_results

LENGTH_COLUMNS = ["trial", "total_episodes", "policy_model", "rule", "mean", "ci_low", "ci_high", "n", "own_episodes",
                  "own_value", "change", "held"]
COLUMNS = ["trial", "tuning_value", "tuning_rank", "mean", "ci_low", "ci_high", "n", "failed", "pending",
           "feasible_runs", "validated_rank", "ranking"]


def validation_frame(study: optuna.Study, validation: optuna.Study | None) -> pd.DataFrame:
    """One row per validated configuration of ``study``, best validated mean first (by the first objective):
    its tuning value and rank among the validated configurations, the runs' mean and 95% interval, how many runs
    completed (n), failed, are still pending or kept the constraints, its validated rank (none before a run
    completes) and the change of rank in words ("tuning #3 → validated #1"). Empty without a validation."""
    results = validation_results(study, validation)
    if not results:
        return pd.DataFrame(columns=COLUMNS)
    frame = pd.DataFrame([{"trial": r.trial, "tuning_value": r.tuning_value, "mean": r.interval[0],
                           "ci_low": r.interval[1], "ci_high": r.interval[2], "n": r.n, "failed": r.failed,
                           "pending": r.pending, "feasible_runs": r.feasible_runs} for r in results])
    maximize = study.directions[0] == StudyDirection.MAXIMIZE
    # Ties share the better rank; a configuration whose tuning trial has no value ranks last.
    frame["tuning_rank"] = frame["tuning_value"].rank(ascending=not maximize, method="min", na_option="bottom")
    # validation_results ranks already: those whose fresh runs mostly kept the constraints first, each group by
    # validated mean, those without a completed run last.
    validated = frame["n"] > 0
    frame["validated_rank"] = pd.Series(range(1, len(frame) + 1), dtype="Int64").where(validated)
    frame["tuning_rank"] = frame["tuning_rank"].astype("Int64")
    frame["ranking"] = [
        f"tuning #{tuned} → " + (f"validated #{rank}" if not pd.isna(rank) else "no completed run yet")
        for tuned, rank in zip(frame["tuning_rank"], frame["validated_rank"], strict=True)
    ]
    return frame[COLUMNS]


def validation_figure(frame: pd.DataFrame, objective: str) -> go.Figure:
    """Per validated configuration (in validated order): its tuning value, and its validated mean with the 95%
    interval as error bars."""
    labels = [f"#{n}" for n in frame["trial"]]
    mean = frame["mean"].astype(float)
    figure = go.Figure([
        go.Scatter(x=labels, y=frame["tuning_value"].astype(float), mode="markers", name="tuning value (its seed)",
                   marker={"symbol": "x", "size": 10}),
        go.Scatter(x=labels, y=mean, mode="markers", name="validated mean, 95% CI", marker={"size": 10},
                   error_y={"type": "data", "symmetric": False, "array": (frame["ci_high"] - mean).astype(float),
                            "arrayminus": (mean - frame["ci_low"]).astype(float)}),
    ])
    # The objective's label ("objective: eval/gold_score, mean of the last 2 values") is longer than the 320 px
    # axis: on two lines, broken after its metric, it shows whole.
    figure.update_layout(xaxis_title="configuration (tuning trial)", yaxis_title=objective.replace(", ", ",<br>", 1),
                         height=320,
                         margin={"t": 30, "b": 40}, legend={"orientation": "h", "y": 1.12})
    figure.update_xaxes(type="category")
    return figure


def validation_caption(frame: pd.DataFrame) -> str:
    """One line under the table: the runs behind it, and those still to come or that failed."""
    runs, failed, pending = int(frame["n"].sum()), int(frame["failed"].sum()), int(frame["pending"].sum())
    seeds = frame["n"] + frame["failed"] + frame["pending"]
    per = f"{int(seeds.max())} seeds each" if seeds.nunique() == 1 else f"{int(seeds.min())}-{int(seeds.max())} seeds"
    parts = [f"{len(frame)} configurations rerun on fresh seeds ({per}): {runs} completed runs"]
    if failed:
        parts.append(f"{failed} failed")
    if pending:
        parts.append(f"{pending} pending")
    text = ", ".join(parts) + "."
    if (frame["n"] == 1).any():
        text += " One completed run gives a mean but no interval."
    return text


def lengths_frame(study: optuna.Study, validation: optuna.Study | None) -> pd.DataFrame:
    """One row per configuration validated at a production length or on another policy (``ppo-tune validate
    --total-episodes`` / ``--policy-model``): the length, the policy (none: the tuned one) and the rule that carried
    it there, its validated mean and interval there, its value at its own length on its own policy (validated
    mean, else tuning value), the relative change and whether it held (``tuner.production.carry``). Empty when none
    was."""
    found = lengths_validated(study, validation)
    return pd.DataFrame([{"trial": at.trial, "total_episodes": at.total_episodes, "policy_model": at.policy_model,
                          "rule": at.rule, "mean": at.mean,
                          "ci_low": at.ci_low, "ci_high": at.ci_high, "n": at.n, "own_episodes": at.own_episodes,
                          "own_value": at.own_value, "change": at.change,
                          "held": "held" if at.held else "did not hold"} for at in found], columns=LENGTH_COLUMNS)
