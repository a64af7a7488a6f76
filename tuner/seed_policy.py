"""Seed policies: which training seeds a study's trials use, and so what chooses its winner.

``single`` (``seed_policy: {name: single}``, the default): every trial trains on the base's seed, and the best
single run wins, partly by that seed's luck. ``racing`` (``{name: racing, seeds: 3, top_k: 3}``, after SMAC's
intensification): whenever a trial completes, each configuration among the ``top_k`` by mean value that has run on
fewer than ``seeds`` seeds is queued again on the next seed (the base's seed + 1, + 2, ...), and the winner is the
best mean among the configurations that ran on the most seeds, so no single seed chooses it. A re-run is an ordinary
trial of the study with the same parameters (the sampler learns from it too), marked with the trial it races.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from tuner.attrs import RACE_OF_ATTR, SEED_ATTR
from tuner.constraints import feasible

POLICIES = ("single", "racing")
QUEUED = (TrialState.WAITING, TrialState.RUNNING)


@dataclass(frozen=True)
class SeedPolicy:
    name: Literal["single", "racing"] = "single"
    seeds: int = 3  # racing: the seeds a leading configuration runs on
    top_k: int = 3  # racing: how many leading configurations are raced

    @property
    def racing(self) -> bool:
        return self.name == "racing"


def parse_seed_policy(raw: Any, objectives: int) -> SeedPolicy | str:
    """The study file's ``seed_policy``, or the one-line reason it is wrong."""
    if raw is None:
        return SeedPolicy()
    if not isinstance(raw, dict):
        return f"seed_policy: expected a mapping such as {{name: racing, seeds: 3, top_k: 3}}, got {raw!r}"
    unknown = sorted(set(raw) - {"name", "seeds", "top_k"})
    if unknown:
        return f"seed_policy.{unknown[0]}: unknown key (expected one of name, seeds, top_k)"
    name = raw.get("name", "single")
    if name not in POLICIES:
        return f"seed_policy.name: expected one of {', '.join(POLICIES)}, got {name!r}"
    for key in ("seeds", "top_k"):
        value = raw.get(key, getattr(SeedPolicy, key))
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"seed_policy.{key}: expected a positive whole number, got {value!r}"
    if name == "racing" and objectives > 1:
        return "seed_policy: racing ranks configurations by one objective's mean; this study has several"
    return SeedPolicy(name=name, seeds=raw.get("seeds", SeedPolicy.seeds), top_k=raw.get("top_k", SeedPolicy.top_k))


def race_root(trial: FrozenTrial) -> int:
    """The trial a configuration was first run as: itself, or the one a re-run races."""
    return int(trial.user_attrs.get(RACE_OF_ATTR, trial.number))


@dataclass(frozen=True)
class RacedConfig:
    root: FrozenTrial  # the configuration's first trial
    values: tuple[float, ...]  # its completed runs' first-objective values, one per seed
    feasible: bool  # every completed run kept the study's constraints
    queued: int  # runs waiting or running

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values) if self.values else math.nan


def raced_configs(trials: Sequence[FrozenTrial]) -> list[RacedConfig]:
    """Every configuration with a completed run, its runs grouped by :func:`race_root`."""
    roots = {t.number: t for t in trials}
    groups: dict[int, list[FrozenTrial]] = {}
    for trial in trials:
        groups.setdefault(race_root(trial), []).append(trial)
    configs = []
    for root, runs in groups.items():
        complete = [t for t in runs if t.state == TrialState.COMPLETE and t.values and math.isfinite(t.values[0])]
        if complete and root in roots:
            configs.append(RacedConfig(roots[root], tuple(t.values[0] for t in complete),
                                       all(feasible(t) for t in complete), sum(t.state in QUEUED for t in runs)))
    return configs


def ranked(configs: Sequence[RacedConfig], direction: StudyDirection) -> list[RacedConfig]:
    """Best first: feasible before infeasible, more seeds before fewer, then by mean (a configuration is never
    judged ahead of one that held up on more seeds)."""
    sign = -1.0 if direction == StudyDirection.MAXIMIZE else 1.0
    return sorted(configs, key=lambda c: (not c.feasible, -len(c.values), sign * c.mean, c.root.number))


def leaders(configs: Sequence[RacedConfig], direction: StudyDirection, top_k: int) -> list[RacedConfig]:
    """The ``top_k`` feasible configurations by mean alone, whatever their seeds: the ones worth another seed."""
    sign = -1.0 if direction == StudyDirection.MAXIMIZE else 1.0
    return sorted((c for c in configs if c.feasible), key=lambda c: (sign * c.mean, c.root.number))[:top_k]


def next_runs(trials: Sequence[FrozenTrial], direction: StudyDirection, policy: SeedPolicy,
              base_seed: int) -> list[tuple[FrozenTrial, int]]:
    """(configuration's first trial, seed) for each leader that has fewer than ``policy.seeds`` runs, done or queued;
    the seed is the next after those it has."""
    if not policy.racing:
        return []
    runs = []
    for config in leaders(raced_configs(trials), direction, policy.top_k):
        started = len(config.values) + config.queued
        if started < policy.seeds:
            runs.append((config.root, base_seed + started))
    return runs


class Racing:
    """An ``optimize`` callback: after each completed trial, queue the leaders' next seeds (a worker that finds
    another already queued it leaves it be)."""

    def __init__(self, policy: SeedPolicy, base_seed: int) -> None:
        self.policy = policy
        self.base_seed = base_seed

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if not self.policy.racing or trial.state != TrialState.COMPLETE:
            return
        trials = study.get_trials(deepcopy=False)
        have = {(race_root(t), t.user_attrs.get(SEED_ATTR)) for t in trials if RACE_OF_ATTR in t.user_attrs}
        for root, seed in next_runs(trials, study.directions[0], self.policy, self.base_seed):
            if (root.number, seed) not in have:
                study.enqueue_trial(root.params, user_attrs={RACE_OF_ATTR: root.number, SEED_ATTR: seed},
                                    skip_if_exists=False)


def race_seed(user_attrs: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """A re-run's config: the configuration's, on the seed it was queued with."""
    if RACE_OF_ATTR in user_attrs:
        return {**config, "seed": int(user_attrs[SEED_ATTR])}
    return config


def best_raced(trials: Sequence[FrozenTrial], direction: StudyDirection) -> list[FrozenTrial]:
    """The winning configuration's first trial under racing: the best mean among those on the most seeds."""
    best = ranked(raced_configs(trials), direction)
    return [best[0].root] if best and best[0].feasible else []


__all__ = ["Racing", "SeedPolicy", "best_raced", "next_runs", "parse_seed_policy", "race_seed"]
