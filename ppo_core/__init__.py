"""ppo_core: a compact PPO trainer for causal language models, configured with TRL's PPOConfig names.

The trainer and callbacks load lazily, so importing the config (as the tuner's study parser and the
dashboard do) does not pull in torch and transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

from ppo_core.config.estimator_traits import EstimatorTraits, estimator_names
from ppo_core.config.ppo_config import ConfigError, PPOConfig
from ppo_core.errors import InputError, NonFiniteError
from ppo_core.setup.reported_metrics import evaluation_metrics, reported_metrics

_LAZY = {
    "JsonlWriter": "ppo_core.run.callbacks",
    "SampleGeneration": "ppo_core.run.callbacks",
    "TrainerCallback": "ppo_core.run.callbacks",
    "PPOTrainer": "ppo_core.run.trainer",
    "TrainResult": "ppo_core.run.trainer",
    "AdvantageInputs": "ppo_core.algorithm.estimators",
    "ESTIMATORS": "ppo_core.algorithm.estimators",
    "estimator": "ppo_core.algorithm.estimators",
}

__all__ = ["ConfigError", "EstimatorTraits", "InputError", "NonFiniteError", "PPOConfig", "estimator_names",
           "evaluation_metrics", "reported_metrics", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ppo_core' has no attribute {name!r}")
