"""The samplers and pruners a study file names, and a check of their options against each class's own signature.

A study file can only give what YAML holds: a name the class does not take, or a value of a type it does not take
(which Optuna would only trip over at the first trial, failing every trial alike), is a problem named in one line.
"""

from __future__ import annotations

import inspect
from typing import Any

import optuna

from ppo_core.config.value_types import FILE_TYPES, describe_type, fits
from tuner.search.frontier_sampler import FRONTIER_SAMPLER, FrontierSampler

SAMPLER_CLASSES: dict[str, type[optuna.samplers.BaseSampler]] = {
    "tpe": optuna.samplers.TPESampler,
    "random": optuna.samplers.RandomSampler,
    "cmaes": optuna.samplers.CmaEsSampler,
    "gp": optuna.samplers.GPSampler,
    "nsgaii": optuna.samplers.NSGAIISampler,
    "grid": optuna.samplers.GridSampler,
    "qmc": optuna.samplers.QMCSampler,
    FRONTIER_SAMPLER: FrontierSampler,
}
PRUNER_CLASSES: dict[str, type[optuna.pruners.BasePruner]] = {
    "median": optuna.pruners.MedianPruner,
    "percentile": optuna.pruners.PercentilePruner,
    "hyperband": optuna.pruners.HyperbandPruner,
    "successive_halving": optuna.pruners.SuccessiveHalvingPruner,
}
SEED_LIMIT = 2**32
"""Seeds are 0 to 2**32 - 1, as numpy's RandomState (inside every Optuna sampler) takes them."""


def option_problem(cls: type, options: dict[str, Any], key: str) -> str | None:
    """What is wrong with the first option that is not a keyword ``cls`` takes, or not of a type it takes; None when
    every one is.

    Example::

        option_problem(optuna.samplers.TPESampler, {"n_startup_trials": "ten"}, "sampler")
        # "sampler.n_startup_trials: expected a whole number, got 'ten'"
    """
    parameters = {name: parameter for name, parameter in inspect.signature(cls).parameters.items()
                  if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)}
    for name, value in options.items():
        parameter = parameters.get(name)
        if parameter is None:
            return f"{key}.{name}: not an option of {cls.__name__} (its options: {', '.join(parameters)})"
        annotation = parameter.annotation  # often its text: Optuna's modules postpone their annotations
        if annotation is inspect.Parameter.empty:
            # Unannotated: the default's type stands for the option's, where a file gives that type (a None default
            # says nothing of it).
            default = parameter.default
            if default is None or type(default) not in FILE_TYPES:
                continue
            annotation = type(default)
        # finite: Optuna would take an inf or a nan and trip over it only at the first trial.
        if not fits(value, annotation, finite=True):
            return f"{key}.{name}: expected {describe_type(annotation, plain=True, finite=True)}, got {value!r}"
    return None
