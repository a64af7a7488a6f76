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

__all__ = sorted(_PUBLIC)  # the names, from their one list above
# Below, the same names for type checkers ("import X as X": a re-export), which a test holds to _PUBLIC.

if TYPE_CHECKING:
    from tuner.exports.trl_ppo import trl_arguments as trl_arguments
    from tuner.production.confidence import mean_interval as mean_interval
    from tuner.production.validation import load_validation as load_validation
    from tuner.production.validation import validation_results as validation_results
    from tuner.run.runner import run_study as run_study
    from tuner.run.worker import open_study as open_study
    from tuner.run.worker import run_worker as run_worker
    from tuner.search.space import ParamSpec as ParamSpec
    from tuner.search.space import suggest_params as suggest_params
    from tuner.search.warm_start import warm_start_points as warm_start_points
    from tuner.store.database import create_engine as create_engine
    from tuner.store.database import open_storage as open_storage
    from tuner.store.records import TrialStore as TrialStore
    from tuner.store.records import read_metrics as read_metrics
    from tuner.store.records import read_samples as read_samples
    from tuner.study.edge_findings import edge_findings as edge_findings
    from tuner.study.reports import trial_config as trial_config
    from tuner.study.reports import trials_frame as trials_frame
    from tuner.study.spec import KLGuard as KLGuard
    from tuner.study.spec import Objective as Objective
    from tuner.study.spec import StudySpec as StudySpec
    from tuner.study.study_file import load_study_spec as load_study_spec
    from tuner.study.values import StudySpecError as StudySpecError
    from tuner.study.winner import best_trials as best_trials
    from tuner.trial.factory import make_pruner as make_pruner
    from tuner.trial.factory import make_sampler as make_sampler
    from tuner.trial.kl_guard import KLGuardPruner as KLGuardPruner
    from tuner.trial.reporter import TrialReporter as TrialReporter
    from tuner.trial.trial_function import make_trial_function as make_trial_function


_RENAMED = {"StudyConfigError": "StudySpecError", "make_objective": "make_trial_function"}
"""Former public names, kept for one release: the study file's error is named for the spec it fails to make, and the
function Optuna calls for each trial apart from a study's objectives."""


def __getattr__(name: str) -> Any:
    name = _RENAMED.get(name, name)
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'tuner' has no attribute {name!r}")
