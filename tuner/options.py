"""The samplers and pruners a study file names, and a check of their options against each class's own signature.

A study file can only give what YAML holds: a name the class does not take, or a value of a type it does not take
(which Optuna would only trip over at the first trial, failing every trial alike), is a problem named in one line.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import optuna

from tuner.frontier_sampler import FRONTIER_SAMPLER, FrontierSampler

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

# What a study file (YAML) can give for each kind of annotation Optuna writes; anything else (a callable, another
# sampler object) cannot come from a study file.
_KINDS: dict[str, tuple[str, tuple[type, ...]]] = {
    "bool": ("true or false", (bool,)),
    "int": ("a whole number", (int,)),
    "float": ("a finite number", (int, float)),
    "str": ("a string", (str,)),
    "None": ("null", (type(None),)),
    "dict": ("a mapping", (dict,)),
    "Mapping": ("a mapping", (dict,)),
    "list": ("a list", (list,)),
    "Sequence": ("a list", (list,)),
    "Literal": ("a string", (str,)),
}


def _annotation_parts(annotation: str) -> list[str]:
    """``'int | None'`` -> ``['int', 'None']``; the head of each part (``dict[str, Any]`` -> ``dict``)."""
    parts, depth, current = [], 0, ""
    for char in annotation:
        depth += (char == "[") - (char == "]")
        if char == "|" and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [part.strip().split("[", 1)[0] for part in [*parts, current]]


def _fits(value: Any, kind: str) -> bool:
    _, types = _KINDS.get(kind, ("", ()))
    if isinstance(value, bool) and kind != "bool":
        return False
    if kind == "float" and isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, types)


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
        annotation = parameter.annotation
        if annotation is inspect.Parameter.empty:
            default = parameter.default
            kinds = [type(default).__name__] if type(default).__name__ in _KINDS else []
        else:
            kinds = _annotation_parts(annotation if isinstance(annotation, str) else annotation.__name__)
        if kinds and not any(_fits(value, kind) for kind in kinds):
            wanted = [_KINDS[kind][0] if kind in _KINDS else f"a {kind} (not settable in a study file)"
                      for kind in kinds]
            return f"{key}.{name}: expected {' or '.join(dict.fromkeys(wanted))}, got {value!r}"
    return None
