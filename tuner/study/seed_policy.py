"""Seed policies: which training seeds a study's trials use, and so what chooses its winner.

``single`` (``seed_policy: {name: single}``): every trial trains on the base's seed, and the best single run wins,
partly by that seed's luck. ``racing`` (``{name: racing, seeds: 2, top_k: 2, start: 0.8}``, after SMAC's
intensification): once ``start`` of the study's budget is spent, whenever a trial completes, each configuration among
the ``top_k`` by mean value that has run on fewer than ``seeds`` seeds is queued again on the next seed (the base's
seed + 1, + 2, ...), as long as the budget has room for it, and the winner is the best mean shrunk by the seed noise
the race measured among the configurations run on two seeds or more (:mod:`tuner.study.shrinkage`), so no single
seed's luck chooses it and no clearly better configuration is dropped for the seed the budget ended before. A re-run
is an ordinary trial of the study with the same parameters (the sampler learns from it too), marked with the trial it
races.

A single-objective study that names no seed policy races as ``tuner.study.defaults.SEED_POLICY`` says (a section
without ``name`` gets it, its own keys on top); a study of several objectives has no one mean to race on and runs
``single``.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from ppo_core.config.value_types import fits
from tuner.store.attrs import RACE_OF_ATTR, SEED_ATTR
from tuner.study.constraints import feasible
from tuner.study.defaults import SEED_POLICY
from tuner.study.shrinkage import shrunk_means

POLICIES = ("single", "racing")
QUEUED = (TrialState.WAITING, TrialState.RUNNING)
ENDED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
STARTED = (*ENDED, TrialState.RUNNING)
KEYS = ("name", "seeds", "top_k", "start")


@dataclass(frozen=True)
class SeedPolicy:
    name: Literal["single", "racing"] = "single"
    seeds: int = SEED_POLICY["seeds"]  # racing: the seeds a leading configuration runs on
    top_k: int = SEED_POLICY["top_k"]  # racing: how many leading configurations are raced
    start: float = SEED_POLICY["start"]  # racing: the fraction of the study's budget spent before the first re-run

    @property
    def racing(self) -> bool:
        return self.name == "racing"


def parse_seed_policy(raw: Any, objectives: int) -> SeedPolicy | str:
    """The study file's ``seed_policy``, or the one-line reason it is wrong. None (no section) is the default policy,
    ``single`` for a study of several objectives; a section without ``name`` is the default with its keys on top."""
    if raw is None:
        return SeedPolicy() if objectives > 1 else SeedPolicy(**SEED_POLICY)
    if not isinstance(raw, dict):
        return f"seed_policy: expected a mapping such as {{name: racing, seeds: 2, top_k: 2, start: 0.8}}, got {raw!r}"
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        return f"seed_policy.{unknown[0]}: unknown key (expected one of {', '.join(KEYS)})"
    merged = {**SEED_POLICY, **raw}
    if merged["name"] not in POLICIES:
        return f"seed_policy.name: expected one of {', '.join(POLICIES)}, got {merged['name']!r}"
    for key in ("seeds", "top_k"):
        value = merged[key]
        if not fits(value, int) or value < 1:
            return f"seed_policy.{key}: expected a positive whole number, got {value!r}"
    start = merged["start"]
    if not fits(start, float) or not 0 <= start < 1:
        return f"seed_policy.start: expected a fraction of the study's budget in [0, 1), got {start!r}"
    if merged["name"] == "racing" and objectives > 1:
        return "seed_policy: racing ranks configurations by one objective's mean; this study has several"
    return SeedPolicy(name=merged["name"], seeds=merged["seeds"], top_k=merged["top_k"], start=float(start))


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
    """Best first: feasible before infeasible; then configurations run on two seeds or more before those run on one
    (a single run's luck is unmeasured, and racing exists so that no single run chooses the winner); then by each mean
    shrunk by the seed noise the race measured (:func:`tuner.study.shrinkage.shrunk_means`), so that a configuration
    clearly better on two seeds is not ranked below a worse one on three. Before any configuration has run on two
    seeds there is no noise to weigh by, and the raw mean decides."""
    sign = -1.0 if direction == StudyDirection.MAXIMIZE else 1.0
    shrunk = shrunk_means([config.values for config in configs]) or [config.mean for config in configs]
    by_config = {id(config): value for config, value in zip(configs, shrunk, strict=True)}
    return sorted(configs, key=lambda c: (not c.feasible, len(c.values) < 2, sign * by_config[id(c)],
                                          -len(c.values), c.root.number))


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


class Budget(Protocol):
    """How much of a study's budget its trials have spent, and how many more trials it has room for."""

    def spent(self, trials: Sequence[FrozenTrial]) -> float:
        """The fraction of the budget spent, 0 to 1 (or past it)."""
        ...

    def room(self, trials: Sequence[FrozenTrial]) -> int | None:
        """Trials the budget can still start, queued ones aside; None when it does not count trials."""
        ...


@dataclass(frozen=True)
class TrialBudget:
    """A study run's budget: ``n_trials`` started study-wide, or ``timeout`` seconds since ``started_at`` (monotonic),
    whichever is nearer its end; neither (an unbounded run) counts as spent, so racing is not held back. Past its
    timeout it has room for no trial."""

    n_trials: int | None
    timeout: float | None
    started_at: float = field(default_factory=time.monotonic)

    def _time_spent(self) -> float | None:
        """The fraction of ``timeout`` elapsed; None without one."""
        return (time.monotonic() - self.started_at) / self.timeout if self.timeout else None

    def spent(self, trials: Sequence[FrozenTrial]) -> float:
        fractions = []
        if self.n_trials:
            fractions.append(sum(t.state in STARTED for t in trials) / self.n_trials)
        if (elapsed := self._time_spent()) is not None:
            fractions.append(elapsed)
        return max(fractions, default=1.0)

    def room(self, trials: Sequence[FrozenTrial]) -> int | None:
        # No trial starts once the timeout has run out: a re-run queued then would only wait for another run of
        # the study, raced on a leader that run may no longer have.
        if (self._time_spent() or 0.0) >= 1.0:
            return 0
        if not self.n_trials:
            return None
        # Never below 0: parallel workers can start one trial past n_trials between them, and a negative room
        # would slice the race's list from its end (``runs[:-1]``) and queue a re-run that no worker then runs.
        return max(0, self.n_trials - sum(t.state in STARTED or t.state == TrialState.WAITING for t in trials))


class Racing:
    """An ``optimize`` callback: after each trial that ends, once ``policy.start`` of ``budget`` is spent, queue the
    leaders' next seeds that the budget has room for (a worker that finds another already queued it leaves it be).

    Any end, not only a completed one: a pruned or failed trial changes no leader, but it spends budget, and a study
    whose trials past ``start`` were all stopped by the KL guard would otherwise never race (SmolLM2's second look:
    6 of 12 pruned, the winner chosen on one seed)."""

    def __init__(self, policy: SeedPolicy, base_seed: int, budget: Budget | None = None) -> None:
        self.policy = policy
        self.base_seed = base_seed
        self.budget = budget

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if not self.policy.racing or trial.state not in ENDED:
            return
        trials = study.get_trials(deepcopy=False)
        if self.budget is not None and self.budget.spent(trials) < self.policy.start:
            return
        room = None if self.budget is None else self.budget.room(trials)
        have = {(race_root(t), t.user_attrs.get(SEED_ATTR)) for t in trials if RACE_OF_ATTR in t.user_attrs}
        runs = [(root, seed) for root, seed in next_runs(trials, study.directions[0], self.policy, self.base_seed)
                if (root.number, seed) not in have]
        for root, seed in runs[:room]:
            study.enqueue_trial(root.params, user_attrs={RACE_OF_ATTR: root.number, SEED_ATTR: seed},
                                skip_if_exists=False)


def race_seed(user_attrs: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """A re-run's config: the configuration's, on the seed it was queued with."""
    if RACE_OF_ATTR in user_attrs:
        return {**config, "seed": int(user_attrs[SEED_ATTR])}
    return config


def best_raced(trials: Sequence[FrozenTrial], direction: StudyDirection) -> list[FrozenTrial]:
    """The winning configuration's first trial under racing: the first of :func:`ranked`."""
    best = ranked(raced_configs(trials), direction)
    return [best[0].root] if best and best[0].feasible else []


__all__ = ["Budget", "Racing", "SeedPolicy", "TrialBudget", "best_raced", "next_runs", "parse_seed_policy", "race_seed"]
