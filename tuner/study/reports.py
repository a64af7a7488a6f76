"""Tables of studies and trials (pandas), and a trial's config, for the CLI and the dashboard; who won a study is
``tuner.study.winner``'s."""

from __future__ import annotations

import math
from typing import Any

import optuna
import pandas as pd
from optuna.trial import FrozenTrial, TrialState

from tuner.store.attrs import (
    BUDGET_ATTR,
    CONFIG_ATTR,
    CPU_THREADS_ATTR,
    FAIL_REASON_ATTR,
    KL_HISTORY_ATTR,
    PRUNE_REASON_ATTR,
    RACE_OF_ATTR,
    SEED_ATTR,
)
from tuner.study.winner import read_winner


def study_summaries(storage: str | optuna.storages.BaseStorage) -> pd.DataFrame:
    """One row per study: trial counts by state and the best value(s)."""
    rows = []
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        trials = study.get_trials(deepcopy=False)
        counts = {state.name.lower(): sum(t.state == state for t in trials) for state in TrialState}
        best = read_winner(study).trials
        rows.append({
            "study": summary.study_name,
            "directions": ",".join(d.name.lower() for d in study.directions),
            "trials": len(trials),
            **{k: v for k, v in counts.items() if k in ("complete", "pruned", "fail", "running", "waiting")},
            "best_trial": best[0].number if best else None,
            "best_value": _format_values(best[0].values) if best else "",
        })
    return pd.DataFrame(rows)


def _format_values(values: list[float] | None) -> str:
    if not values:
        return ""
    return ", ".join(f"{v:.4g}" for v in values)


def trial_reason(trial: FrozenTrial) -> str:
    return str(trial.user_attrs.get(PRUNE_REASON_ATTR) or trial.user_attrs.get(FAIL_REASON_ATTR) or "")


def updates_run(trial: FrozenTrial) -> int:
    return len(trial.user_attrs.get(KL_HISTORY_ATTR, []))


def trials_frame(study: optuna.Study) -> pd.DataFrame:
    """number, state, params, objective values, prune/fail reason, duration, updates run and planned
    (``budget_updates``, the run's full length) and episodes per update for every trial; a racing re-run's
    ``race_of`` and ``seed``, and a CPU trial's ``cpu_threads``, where any trial has them."""
    names = study.metric_names or [f"value_{i}" for i in range(len(study.directions))]
    rows = []
    for trial in study.get_trials(deepcopy=False):
        row: dict[str, Any] = {"number": trial.number, "state": trial.state.name}
        row.update({f"param:{k}": v for k, v in trial.params.items()})
        for index, name in enumerate(names):
            row[name] = trial.values[index] if trial.values else math.nan
        duration = trial.duration.total_seconds() if trial.duration is not None else math.nan
        if RACE_OF_ATTR in trial.user_attrs:  # a racing re-run: which configuration, on which seed
            row.update({"race_of": trial.user_attrs[RACE_OF_ATTR], "seed": trial.user_attrs.get(SEED_ATTR)})
        if CPU_THREADS_ATTR in trial.user_attrs:  # trained on the CPU, whose thread count changes the numbers
            row["cpu_threads"] = trial.user_attrs[CPU_THREADS_ATTR]
        budget = trial.user_attrs.get(BUDGET_ATTR)
        row.update({"reason": trial_reason(trial), "duration_s": duration, "updates": updates_run(trial),
                    "budget_updates": budget if isinstance(budget, int) else math.nan,
                    "episodes_per_update": episodes_per_update(trial)})
        rows.append(row)
    return pd.DataFrame(rows)


def episodes_per_update(trial: FrozenTrial) -> float:
    """The episodes one update of the trial generates on each process (its config's per_device_train_batch_size x
    gradient_accumulation_steps); NaN when it stored no config."""
    config = trial.user_attrs.get(CONFIG_ATTR) or {}
    micro, accumulation = config.get("per_device_train_batch_size"), config.get("gradient_accumulation_steps")
    if isinstance(micro, bool) or isinstance(accumulation, bool) or not isinstance(micro, int) \
            or not isinstance(accumulation, int):
        return math.nan
    return float(micro * accumulation)


def trial_config(trial: FrozenTrial) -> dict[str, Any]:
    """The full resolved PPOConfig values the trial ran with."""
    return dict(trial.user_attrs.get(CONFIG_ATTR, {}))
