"""The tuning strategies the replay compares, as data: one registry, so adding one touches one place.

A strategy is a sampler, a pruner (the fidelity schedule), a seed policy, warm starts on or off and the KL guard on
or off. Every strategy in ``BASE`` also runs with its guard flipped: ``<name>-noguard`` for one that has it,
``<name>-guard`` for one that has not (``random``).

The shipped settings come from the study file itself (``studies/quickstart.yaml``): ``tpe`` is the sampler
``tuner.factory.make_sampler`` builds from its ``sampler`` section (TPE, 8 startup trials, the constant liar), with
the repeat's seed; ``median`` its ``pruner`` section (6 startup trials, 12 warm-up steps). The other model-based
samplers take the same 8 startup trials, so that they differ from ``tpe`` only in their model. ``sha`` and
``hyperband`` stop at the held-out evaluations, in updates as every pruner here counts them (a trial reports at step
= update, as the tuner does): the first rung is the first evaluation of the table's longest runs (12 updates of 96 on
the quickstart), and each rung keeps a third (Optuna's Hyperband default, 3).

Example::

    sampler = make_sampler(STRATEGIES["gp"], spec, seed=3)
    pruner = make_pruner(STRATEGIES["sha_tpe"], spec, Fidelity(min_resource=12, max_resource=96))
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass

import optuna

from tuner.factory import make_pruner as study_pruner
from tuner.factory import make_sampler as study_sampler
from tuner.study_config import StudySpec

REDUCTION_FACTOR = 3
"""Successive halving and Hyperband keep the best third at each rung."""
SEED_POLICIES = ("single", "racing")


@dataclass(frozen=True)
class Strategy:
    name: str
    sampler: str
    """random, tpe (the study's), tpe_multivariate (TPESampler(multivariate=True, group=True)) or gp."""
    pruner: str
    """none, median (the study's), sha (SuccessiveHalvingPruner) or hyperband (HyperbandPruner)."""
    guard: bool
    """The study's KL guard (``tuner.kl_guard.blowup_reason`` with its ``kl_guard`` section), or none."""
    seeds: str = "single"
    """single: every trial of a repeat on one table seed; racing: the tuner's racing policy (``tuner.seed_policy``),
    the top 3 configurations by mean rerun on the next seeds until each has 3."""
    warm_starts: bool = False
    """The study's ``enqueue`` points (trl_defaults, seed_guidance) first."""

    def guard_flipped(self) -> Strategy:
        name = f"{self.name}-noguard" if self.guard else f"{self.name}-guard"
        return dataclasses.replace(self, name=name, guard=not self.guard)


BASE = (
    Strategy("random", "random", "none", guard=False),
    Strategy("tpe_shipped", "tpe", "median", guard=True, warm_starts=True),
    Strategy("tpe_multivariate", "tpe_multivariate", "median", guard=True),
    Strategy("gp", "gp", "median", guard=True),
    Strategy("sha_random", "random", "sha", guard=True),
    Strategy("sha_tpe", "tpe", "sha", guard=True),
    Strategy("hyperband_random", "random", "hyperband", guard=True),
    Strategy("hyperband_tpe", "tpe", "hyperband", guard=True),
    Strategy("hyperband_tpe_multivariate", "tpe_multivariate", "hyperband", guard=True),
    Strategy("hyperband_gp", "gp", "hyperband", guard=True),
    Strategy("racing", "tpe", "median", guard=True, seeds="racing", warm_starts=True),
)
STRATEGIES: dict[str, Strategy] = {s.name: s for base in BASE for s in (base, base.guard_flipped())}
DEFAULT_STRATEGY = "tpe_shipped"
"""What a study runs by default (studies/quickstart.yaml's settings); a change of the shipped default changes this."""
QUICK_STRATEGIES = ("random", "tpe_shipped", "tpe_shipped-noguard", "gp", "sha_tpe", "hyperband_random", "racing")


@dataclass(frozen=True)
class Fidelity:
    """The rungs' scale, from the table: the first evaluation of its longest runs, and their length (updates)."""

    min_resource: int
    max_resource: int


def make_sampler(strategy: Strategy, spec: StudySpec, seed: int) -> optuna.samplers.BaseSampler:
    """The strategy's sampler, seeded with ``seed``."""
    startup = int(spec.sampler.get("n_startup_trials", 10))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if strategy.sampler == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if strategy.sampler == "tpe":
            return study_sampler(dataclasses.replace(spec, sampler={**spec.sampler, "seed": seed}))
        if strategy.sampler == "tpe_multivariate":
            return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, multivariate=True, group=True,
                                              constant_liar=True)
        if strategy.sampler == "gp":
            # The conditional parameters (kl_coef or kl_target) lie outside the GP's intersection space and are drawn
            # at random, which it would warn about at every trial.
            return optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup, warn_independent_sampling=False)
    raise ValueError(f"unknown sampler {strategy.sampler!r}")


def make_pruner(strategy: Strategy, spec: StudySpec, fidelity: Fidelity) -> optuna.pruners.BasePruner:
    """The strategy's pruner; the KL guard is replayed apart from it (``benchmarks.replay_trial``), before it, on every
    update, as the tuner's reporter asks it."""
    if strategy.pruner == "none":
        return optuna.pruners.NopPruner()
    if strategy.pruner == "median":
        inner = study_pruner(spec).inner
        assert inner is not None, "the study file names no pruner"
        return inner
    if strategy.pruner == "sha":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=fidelity.min_resource,
                                                      reduction_factor=REDUCTION_FACTOR)
    if strategy.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=fidelity.min_resource, max_resource=fidelity.max_resource,
                                              reduction_factor=REDUCTION_FACTOR)
    raise ValueError(f"unknown pruner {strategy.pruner!r}")
