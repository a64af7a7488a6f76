"""Tables of studies and trials (pandas), and the best trial's config, for the CLI and the dashboard."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import optuna
import pandas as pd
from optuna.study import StudyDirection
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
from tuner.study.constraints import feasible
from tuner.study.seed_policy import best_raced, raced_configs
from tuner.study.stored import stored_seed_policy


def study_summaries(storage: str | optuna.storages.BaseStorage) -> pd.DataFrame:
    """One row per study: trial counts by state and the best value(s)."""
    rows = []
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        trials = study.get_trials(deepcopy=False)
        counts = {state.name.lower(): sum(t.state == state for t in trials) for state in TrialState}
        best = best_trials(study)
        rows.append({
            "study": summary.study_name,
            "directions": ",".join(d.name.lower() for d in study.directions),
            "trials": len(trials),
            **{k: v for k, v in counts.items() if k in ("complete", "pruned", "fail", "running", "waiting")},
            "best_trial": best[0].number if best else None,
            "best_value": _format_values(best[0].values) if best else "",
        })
    return pd.DataFrame(rows)


def best_trials(study: optuna.Study, racing: bool | None = None) -> list[FrozenTrial]:
    """The best trial, or for several objectives the Pareto front ordered by the first objective; among feasible
    trials only, as Optuna chooses them (empty while no completed trial keeps every constraint). ``racing``: whether
    the study races (:func:`is_racing`), for a caller that has read its stored definition already."""
    if not any(feasible(t) for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))):
        return []  # study.best_trial would raise ValueError
    if (is_racing(study) if racing is None else racing):  # the best mean over the most seeds, not the luckiest run
        return best_raced(study.get_trials(deepcopy=False), study.directions[0])
    if len(study.directions) == 1:
        return [study.best_trial]
    sign = -1 if study.directions[0] == optuna.study.StudyDirection.MAXIMIZE else 1
    return sorted(study.best_trials, key=lambda t: sign * t.values[0])


@dataclass(frozen=True)
class BestFigure:
    """The best trial's headline figure, as every view shows it: the value the study chose it on."""

    trial: int
    value: float
    seeds: int
    """Runs the value is the mean of: a raced configuration's seeds, else 1 (its own run)."""

    @property
    def what(self) -> str:
        """"mean of 2 seeds" or "one seed"."""
        return f"mean of {self.seeds} seeds" if self.seeds > 1 else "one seed"

    def words(self) -> str:
        """"0.7480, mean of 2 seeds" or "0.7427, one seed"."""
        return f"{self.value:.4f}, {self.what}"


def best_figure(study: optuna.Study, best: Sequence[FrozenTrial] | None = None,
                racing: bool | None = None) -> BestFigure | None:
    """The best trial (:func:`best_trials`, or ``best`` when the caller has it already) and its first objective's
    value as the study ranks it: a raced configuration's mean over its seeds, else its own run's value; None without
    a best trial, or for several objectives (a front has no one figure). ``racing`` as :func:`best_trials` takes it."""
    racing = is_racing(study) if racing is None else racing
    best = best_trials(study, racing) if best is None else best
    if not best or len(study.directions) > 1:
        return None
    if racing:  # the winner is chosen on its mean: that is its figure, not its first run's value
        for config in raced_configs(study.get_trials(deepcopy=False)):
            if config.root.number == best[0].number:
                return BestFigure(best[0].number, config.mean, len(config.values))
    return BestFigure(best[0].number, best[0].values[0], 1)


def is_racing(study: optuna.Study) -> bool:
    """Whether the study's stored definition races configurations on seeds (tuner.study.seed_policy; a definition that
    names no policy gets the default's). A study stored without a definition raced nothing."""
    policy = stored_seed_policy(study.user_attrs, len(study.directions))
    return policy is not None and policy.racing


def rank_completed(trials: Sequence[FrozenTrial], directions: Sequence[StudyDirection]) -> list[FrozenTrial]:
    """Completed trials with a finite first objective, feasible ones first, each group best first by the first
    objective (ties in trial order)."""
    sign = -1.0 if directions[0] == StudyDirection.MAXIMIZE else 1.0
    complete = [t for t in trials if t.state == TrialState.COMPLETE and t.values and math.isfinite(t.values[0])]
    return sorted(complete, key=lambda t: (not feasible(t), sign * t.values[0], t.number))


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
