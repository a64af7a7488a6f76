"""tuner: Optuna studies over PPO's knobs, with trials stopped when their KL blows up.

The public names are listed here, as Optuna's ``__init__`` lists its own. They load on first use, so a
reader that needs only ``tuner.attrs`` (the dashboard) does not pull in torch through the trainer.

Example::

    import tuner

    spec = tuner.load_study_spec("studies/quickstart.yaml")
    tuner.run_study(spec, n_trials=spec.n_trials, timeout=None, workers=2)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_PUBLIC = {
    "KLGuard": "tuner.study_spec",
    "Objective": "tuner.study_spec",
    "StudyConfigError": "tuner.study_values",
    "StudySpec": "tuner.study_spec",
    "load_study_spec": "tuner.study_config",
    "ParamSpec": "tuner.search_space",
    "suggest_params": "tuner.search_space",
    "KLGuardPruner": "tuner.kl_guard",
    "make_pruner": "tuner.factory",
    "make_sampler": "tuner.factory",
    "TrialReporter": "tuner.trial_reporter",
    "make_objective": "tuner.objective",
    "open_study": "tuner.worker",
    "run_worker": "tuner.worker",
    "run_study": "tuner.runner",
    "create_engine": "tuner.database",
    "open_storage": "tuner.database",
    "TrialStore": "tuner.trial_records",
    "read_metrics": "tuner.trial_records",
    "read_samples": "tuner.trial_records",
    "best_trials": "tuner.reports",
    "trial_config": "tuner.reports",
    "trials_frame": "tuner.reports",
    "trl_arguments": "tuner.exports.trl_ppo",
    "validation_results": "tuner.validation",
    "load_validation": "tuner.validation",
    "mean_interval": "tuner.confidence",
    "edge_findings": "tuner.edge_findings",
    "warm_start_points": "tuner.warm_start",
}

__all__ = [
    "KLGuard",
    "KLGuardPruner",
    "Objective",
    "ParamSpec",
    "StudyConfigError",
    "StudySpec",
    "TrialReporter",
    "TrialStore",
    "best_trials",
    "create_engine",
    "edge_findings",
    "load_study_spec",
    "load_validation",
    "make_objective",
    "make_pruner",
    "make_sampler",
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
    from tuner.confidence import mean_interval
    from tuner.database import create_engine, open_storage
    from tuner.edge_findings import edge_findings
    from tuner.exports.trl_ppo import trl_arguments
    from tuner.factory import make_pruner, make_sampler
    from tuner.kl_guard import KLGuardPruner
    from tuner.objective import make_objective
    from tuner.reports import best_trials, trial_config, trials_frame
    from tuner.runner import run_study
    from tuner.search_space import ParamSpec, suggest_params
    from tuner.study_config import load_study_spec
    from tuner.study_spec import KLGuard, Objective, StudySpec
    from tuner.study_values import StudyConfigError
    from tuner.trial_records import TrialStore, read_metrics, read_samples
    from tuner.trial_reporter import TrialReporter
    from tuner.validation import load_validation, validation_results
    from tuner.warm_start import warm_start_points
    from tuner.worker import open_study, run_worker


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'tuner' has no attribute {name!r}")
