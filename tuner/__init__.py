"""tuner: Optuna studies over PPO's knobs, with trials stopped when their KL blows up.

The public names are listed here, as Optuna's ``__init__`` lists its own. They load on first use, so a
reader that needs only ``tuner.store.attrs`` (the dashboard) does not pull in torch through the trainer.

Example::

    import tuner

    spec = tuner.load_study_spec("studies/quickstart.yaml")
    tuner.run_study(spec, n_trials=spec.n_trials, timeout=None, workers=2)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_PUBLIC = {
    "KLGuard": "tuner.study.spec",
    "Objective": "tuner.study.spec",
    "StudySpecError": "tuner.study.values",
    "StudySpec": "tuner.study.spec",
    "load_study_spec": "tuner.study.study_file",
    "ParamSpec": "tuner.search.space",
    "suggest_params": "tuner.search.space",
    "KLGuardPruner": "tuner.trial.kl_guard",
    "make_pruner": "tuner.trial.factory",
    "make_sampler": "tuner.trial.factory",
    "TrialReporter": "tuner.trial.reporter",
    "make_trial_function": "tuner.trial.trial_function",
    "open_study": "tuner.run.worker",
    "run_worker": "tuner.run.worker",
    "run_study": "tuner.run.runner",
    "create_engine": "tuner.store.database",
    "open_storage": "tuner.store.database",
    "TrialStore": "tuner.store.records",
    "read_metrics": "tuner.store.records",
    "read_samples": "tuner.store.records",
    "best_trials": "tuner.study.winner",
    "trial_config": "tuner.study.reports",
    "trials_frame": "tuner.study.reports",
    "trl_arguments": "tuner.exports.trl_ppo",
    "validation_results": "tuner.production.validation",
    "load_validation": "tuner.production.validation",
    "mean_interval": "tuner.production.confidence",
    "edge_findings": "tuner.study.edge_findings",
    "warm_start_points": "tuner.search.warm_start",
}

__all__ = [
    "KLGuard",
    "KLGuardPruner",
    "Objective",
    "ParamSpec",
    "StudySpec",
    "StudySpecError",
    "TrialReporter",
    "TrialStore",
    "best_trials",
    "create_engine",
    "edge_findings",
    "load_study_spec",
    "load_validation",
    "make_pruner",
    "make_sampler",
    "make_trial_function",
    "mean_interval",
    "open_storage",
    "open_study",
    "read_metrics",
    "read_samples",
    "run_study",
    "run_worker",
    "suggest_params",
    "trial_config",
    "trials_frame",
    "trl_arguments",
    "validation_results",
    "warm_start_points",
]

if TYPE_CHECKING:
    from tuner.exports.trl_ppo import trl_arguments
    from tuner.production.confidence import mean_interval
    from tuner.production.validation import load_validation, validation_results
    from tuner.run.runner import run_study
    from tuner.run.worker import open_study, run_worker
    from tuner.search.space import ParamSpec, suggest_params
    from tuner.search.warm_start import warm_start_points
    from tuner.store.database import create_engine, open_storage
    from tuner.store.records import TrialStore, read_metrics, read_samples
    from tuner.study.edge_findings import edge_findings
    from tuner.study.reports import trial_config, trials_frame
    from tuner.study.spec import KLGuard, Objective, StudySpec
    from tuner.study.study_file import load_study_spec
    from tuner.study.values import StudySpecError
    from tuner.study.winner import best_trials
    from tuner.trial.factory import make_pruner, make_sampler
    from tuner.trial.kl_guard import KLGuardPruner
    from tuner.trial.reporter import TrialReporter
    from tuner.trial.trial_function import make_trial_function


_RENAMED = {"StudyConfigError": "StudySpecError", "make_objective": "make_trial_function"}
"""Former public names, kept for one release: the study file's error is named for the spec it fails to make, and the
function Optuna calls for each trial apart from a study's objectives."""


def __getattr__(name: str) -> Any:
    name = _RENAMED.get(name, name)
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'tuner' has no attribute {name!r}")
