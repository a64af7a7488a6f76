"""Optuna samplers and pruners from a study file's ``sampler`` and ``pruner`` sections."""

from __future__ import annotations

from typing import Any

import numpy as np
import optuna

from tuner.kl_guard import KLGuardPruner
from tuner.study_config import ParamSpec, StudyConfigError, StudySpec


def _grid(space: dict[str, ParamSpec]) -> dict[str, list[Any]]:
    grid: dict[str, list[Any]] = {}
    for name, spec in space.items():
        if spec.type == "categorical":
            grid[name] = list(spec.choices)
        elif spec.step is not None or spec.type == "int":
            assert spec.low is not None and spec.high is not None  # numeric parameters have both
            step = spec.step or 1
            points = np.arange(spec.low, spec.high + step / 2, step)
            grid[name] = [int(p) for p in points] if spec.type == "int" else [float(p) for p in points]
        else:
            raise StudyConfigError(f"search_space.{name}: the grid sampler needs choices or a step")
    return grid


def make_sampler(spec: StudySpec, worker_index: int = 0) -> optuna.samplers.BaseSampler:
    """The study's sampler; each parallel worker offsets the seed, or seeded workers would propose alike."""
    options = {k: v for k, v in spec.sampler.items() if k != "name"}
    if options.get("seed") is not None:
        options["seed"] = int(options["seed"]) + worker_index
    name = spec.sampler["name"]
    try:
        if name == "tpe":
            # The constant liar keeps parallel workers from proposing the same point.
            options.setdefault("constant_liar", True)
            return optuna.samplers.TPESampler(**options)
        if name == "random":
            return optuna.samplers.RandomSampler(**options)
        if name == "cmaes":
            return optuna.samplers.CmaEsSampler(**options)
        if name == "gp":
            return optuna.samplers.GPSampler(**options)
        if name == "nsgaii":
            return optuna.samplers.NSGAIISampler(**options)
        if name == "qmc":
            return optuna.samplers.QMCSampler(**options)
        return optuna.samplers.GridSampler(_grid(spec.search_space), **options)
    except TypeError as error:
        raise StudyConfigError(f"sampler: {error}") from None


def make_pruner(spec: StudySpec) -> KLGuardPruner:
    """The KL guard, wrapping the reward-based pruner the study names (if any)."""
    options = {k: v for k, v in spec.pruner.items() if k != "name"}
    name = spec.pruner["name"]
    classes: dict[str, type[optuna.pruners.BasePruner]] = {
        "median": optuna.pruners.MedianPruner,
        "percentile": optuna.pruners.PercentilePruner,
        "hyperband": optuna.pruners.HyperbandPruner,
        "successive_halving": optuna.pruners.SuccessiveHalvingPruner,
    }
    inner = None
    if name != "none":
        try:
            inner = classes[name](**options)
        except TypeError as error:
            raise StudyConfigError(f"pruner: {error}") from None
    return KLGuardPruner(spec.kl_guard, inner)
