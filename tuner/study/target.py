"""A study's target trainer (``target: verl`` in the study file): the trainer its winner will run in.

Naming one makes the trials compute what that trainer computes: its profile (the ppo_core settings that match the
trainer's fixed constants and variants, e.g. verl's GRPO epsilon 1e-6, TRL RLOO's whole-response ratio) fills the
base where the study file leaves a field unset, and a study whose fixed or searched values the target cannot compute
is refused when the file is read, naming the first difference. What differs only at extremes (a KL clamp a healthy
run never reaches) or by less than any tuning signal is said by the export, not refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ppo_core.config.ppo_config import ConfigError
from tuner.exports import TARGETS, differences
from tuner.exports.computes import EdgeLine
from tuner.search.space import ParamSpec, choose_point, config_values, first_value, regimes
from tuner.search.warm_start import WarmStart

Space = Mapping[str, ParamSpec]


def target_base(name: str, base: Mapping[str, Any], searched: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with the target's profile under it: the study file's own values win, searched fields stay searched."""
    profile = {key: value for key, value in TARGETS[name].profile.items() if key not in searched}
    return {**profile, **base}


def target_problem(name: str, config: Mapping[str, Any]) -> str | None:
    """The first thing the target would compute differently from ``config`` (a resolved config dict); None when
    the export is exact, or differs only at the edges."""
    found = [line for line in differences(name, dict(config)) if not isinstance(line, EdgeLine)]
    return found[0] if found else None


def _point(space: Space, base: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """Base plus the search-space point that takes ``values`` where given, the first choice or low end elsewhere."""
    chosen = choose_point(space, lambda param: values.get(param.name, first_value(param)), base)
    return {**base, **config_values(chosen, base)}


def study_points(space: Space, base: Mapping[str, Any], enqueue: list[WarmStart]) -> list[tuple[str, dict[str, Any]]]:
    """The configs a study's check reads: each regime's example, each searched value (every choice, both ends of
    every range) in each regime that uses it, and each warm start."""
    points: list[tuple[str, dict[str, Any]]] = []
    for decided, regime in regimes(space, base):
        points.append(("the base", _point(space, base, decided)))
        for name, param in space.items():
            if regime.uses(name):
                for value in param.choices if param.type == "categorical" else [param.low, param.high]:
                    points.append((f"search_space.{name} {value}", _point(space, base, {**decided, name: value})))
    for start in enqueue:
        if start.skipped is None:
            points.append((start.label, {**base, **config_values(start.params, base)}))
    return points


def target_check(target: str, space: Space, base: Mapping[str, Any], enqueue: list[WarmStart]) -> str | None:
    """Why a study's trials could compute something its ``target`` does not; None when none can."""
    # The config reader loads the built-in tasks' code; a reader of stored studies (the dashboard) needs none of it.
    from ppo_core.config.io import build_config

    for where, values in study_points(space, base, enqueue):
        try:
            config = build_config(values).to_dict()
        except ConfigError:
            continue  # the study file's other checks name what cannot build
        problem = target_problem(target, config)
        if problem is not None:
            # A difference names its field first: where that field is searched, the value drawn is the place.
            field = problem.split("=", 1)[0]
            if field in space and field in config:
                where = f"search_space.{field} {config[field]}"
            return f"target {target}: at {where}, {problem} (set the field in base, or leave the target unset)"
    return None
