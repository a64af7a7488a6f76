"""The study as the pages see it: the trial table, configs, best trials and KL guard, as plain data.

Nothing here knows about Streamlit; ``dashboard.cache`` keeps the results between reruns.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from optuna.trial import FrozenTrial

from dashboard.reader import Snapshot, StudyReader
from dashboard.sources import StudyRef, open_read_only_engine, open_read_only_storage
from tuner.attrs import CONFIG_ATTR, KL_HISTORY_ATTR
from tuner.reports import best_trials, trials_frame

DEFAULT_KL_THRESHOLD = 20.0  # the tuner's KLGuard default, used when a study does not record its own
DEFAULT_KL_METRIC = "objective/kl"
KL_GUARD_ATTR = "kl_guard"  # study user attr: {"threshold": ..., "metric": ...}
STATE_ORDER = ("COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING")


@dataclass(frozen=True)
class KLGuardSettings:
    threshold: float = DEFAULT_KL_THRESHOLD
    metric: str = DEFAULT_KL_METRIC


@dataclass(frozen=True)
class StudyView:
    """Everything about a study's trials that the pages show, without the per-update data."""

    ref: StudyRef
    directions: tuple[str, ...]
    objective_names: tuple[str, ...]
    trials: pd.DataFrame  # one row per trial, columns as tuner.reports.trials_frame plus KL columns
    configs: Mapping[int, Mapping[str, Any]]
    best: tuple[int, ...]  # the best trial, or the Pareto front
    kl_guard: KLGuardSettings
    counts: Mapping[str, int] = field(default_factory=dict)  # trials by state, states with none left out

    @property
    def numbers(self) -> list[int]:
        return [int(n) for n in self.trials["number"]] if not self.trials.empty else []

    @property
    def multi_objective(self) -> bool:
        return len(self.directions) > 1

    def states(self) -> dict[int, str]:
        return dict(zip(self.numbers, self.trials["state"], strict=True)) if not self.trials.empty else {}

    def kl_targets(self) -> dict[int, float]:
        """The adaptive controller's target of each trial that has one."""
        targets = {}
        for number, config in self.configs.items():
            target = config.get("kl_target")
            if isinstance(target, (int, float)) and math.isfinite(target):
                targets[number] = float(target)
        return targets


def kl_guard_settings(user_attrs: Mapping[str, Any], system_attrs: Mapping[str, Any]) -> KLGuardSettings:
    """The study's KL guard as recorded on the study (user attrs first), else the tuner's default."""
    recorded = user_attrs.get(KL_GUARD_ATTR) or system_attrs.get(KL_GUARD_ATTR) or {}
    if not isinstance(recorded, Mapping):
        return KLGuardSettings()
    try:
        threshold = float(recorded.get("threshold", DEFAULT_KL_THRESHOLD))
    except (TypeError, ValueError):
        threshold = DEFAULT_KL_THRESHOLD
    metric = recorded.get("metric")
    return KLGuardSettings(threshold, metric if isinstance(metric, str) else DEFAULT_KL_METRIC)


def _max_finite(values: list[Any]) -> float:
    finite = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return max(finite) if finite else math.nan


def _kl_columns(trial: FrozenTrial) -> dict[str, Any]:
    config = trial.user_attrs.get(CONFIG_ATTR, {}) or {}
    history = list(trial.user_attrs.get(KL_HISTORY_ATTR, []) or [])
    target = config.get("kl_target")
    return {
        "kl_control": "adaptive" if target is not None else ("fixed" if config else ""),
        "max_kl": _max_finite(history),
        "last_kl": float(history[-1]) if history and isinstance(history[-1], (int, float)) else math.nan,
    }


def build_study_view(ref: StudyRef, snapshot: Snapshot) -> StudyView:
    study = snapshot.study
    frame = trials_frame(study)
    by_number = {trial.number: trial for trial in snapshot.trials}
    if not frame.empty:
        extra = pd.DataFrame([_kl_columns(by_number[int(n)]) for n in frame["number"]], index=frame.index)
        if "param:kl_control" in frame.columns:  # searched, so the parameter column already says it
            extra = extra.drop(columns="kl_control")
        # Keep reports' column order and put the KL summary after the objective values.
        insert_at = list(frame.columns).index("reason")
        for offset, column in enumerate(extra.columns):
            frame.insert(insert_at + offset, column, extra[column])
    objective_names = tuple(study.metric_names or [f"value_{i}" for i in range(len(study.directions))])
    counts = {state: int((frame["state"] == state).sum()) for state in STATE_ORDER} if not frame.empty else {}
    counts = {state: count for state, count in counts.items() if count}
    return StudyView(
        ref=ref,
        directions=tuple(d.name.lower() for d in study.directions),
        objective_names=objective_names,
        trials=frame,
        configs={trial.number: dict(trial.user_attrs.get(CONFIG_ATTR, {}) or {}) for trial in snapshot.trials},
        best=tuple(trial.number for trial in best_trials(study)),
        kl_guard=kl_guard_settings(snapshot.user_attrs, snapshot.system_attrs),
        counts=counts,
    )


def open_reader(ref: StudyRef) -> StudyReader:
    """A reader on a study, for scripts and benchmarks (the app keeps one per study in its cache)."""
    return StudyReader(ref, open_read_only_storage(ref.url), open_read_only_engine(ref.url))
