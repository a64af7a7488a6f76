"""The tuning strategies the replay compares, as data: one registry, so adding one touches one place.

A strategy is a sampler, a pruner (the fidelity schedule), a seed policy, warm starts on or off and the KL guard on
or off. Every strategy in ``BASE`` also runs with its guard flipped: ``<name>-noguard`` for one that has it,
``<name>-guard`` for one that has not (``random``).

Samplers are built by the tuner's own ``tuner.trial.factory.make_sampler``, with the repeat's seed: ``tpe`` is Optuna's
independent TPE with 8 start-up trials and the constant liar (the quickstart's sampler until the replay chose another),
``tpe_multivariate`` joint TPE (``tuner.study.defaults.JOINT_TPE``: ``group``, 4 start-up trials), the default search
until the frontier search replaced it, and still the default of a study without a held-out gold objective; ``median`` is
``MEDIAN``, the quickstart's ``pruner`` section until it dropped it (6 start-up trials, 12 warm-up steps), built by the
tuner's own ``tuner.trial.factory.make_pruner``. The other model-based samplers take the same 8 start-up trials unless a
strategy says otherwise, so that they differ only in their model. ``sha`` and ``hyperband`` stop at the held-out
evaluations, in updates as every pruner here counts them (a trial reports at step = update, as the tuner does): the
first rung is the first evaluation of the table's longest runs (12 updates of 96 on the quickstart), and each rung keeps
a third (Optuna's Hyperband default, 3).

Example::

    sampler = make_sampler(STRATEGIES["gp"], spec, seed=3)
    pruner = make_pruner(STRATEGIES["sha_tpe"], spec, Fidelity(min_resource=12, max_resource=96))
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass

import optuna

from tuner.search.frontier_sampler import FrontierSampler
from tuner.study import defaults as study_defaults
from tuner.study.seed_policy import SeedPolicy
from tuner.study.spec import StudySpec
from tuner.trial.factory import make_pruner as study_pruner
from tuner.trial.factory import make_sampler as study_sampler

WARM_STARTS = ("trl_defaults", "seed_guidance")
STARTUP = int(study_defaults.JOINT_TPE["n_startup_trials"])
"""The default search's random start-up trials (joint TPE), unless a strategy names its own."""
OTHER_STARTUP = 8
"""The independent TPE's and GPSampler's: the quickstart's TPE had 8 until the replay."""
REDUCTION_FACTOR = 3
"""Successive halving and Hyperband keep the best third at each rung."""
MEDIAN = {"name": "median", "n_startup_trials": 6, "n_warmup_steps": 12}
"""The median pruner the replay compares: studies/quickstart.yaml's until the live confirmation dropped it."""
PILOT = 0.95
"""The pilot's step-mass quantile among the sampler's candidates (``frontier_pilot*``): near the top of the space, so
that the KL guard stops it once its path has swept KL through the band where gold peaks."""
SINGLE = SeedPolicy()
LATE_RACE = SeedPolicy(**study_defaults.SEED_POLICY)
"""The default seed policy: the 2 leaders on a second seed once 80% of the budget is spent."""


@dataclass(frozen=True)
class Strategy:
    name: str
    sampler: str
    """random, tpe (the study's), tpe_multivariate (TPESampler(multivariate=True, group=True)), gp or frontier
    (``tuner.search.frontier_sampler``: aimed at the KL where gold peaks, read from the repeat's own replayed
    evaluations; ``frontier_budget``: its aims held within the study's KL budget, ``within_budget``)."""
    pruner: str
    """none, median (``MEDIAN``), sha (SuccessiveHalvingPruner) or hyperband (HyperbandPruner)."""
    guard: bool
    """The study's KL guard (``tuner.trial.kl_guard.blowup_reason`` with its ``kl_guard`` section), or none."""
    seed_policy: SeedPolicy = SINGLE
    """The tuner's seed policy (``tuner.study.seed_policy``): ``single`` replays every trial of a repeat on one table
    seed; ``racing`` re-runs the leaders on the next table seeds as the tuner's ``Racing`` callback queues them."""
    warm_starts: bool = False
    """``WARM_STARTS`` first (the quickstart's ``enqueue`` until the replay dropped it)."""
    startup: int | None = None
    """A model-based sampler's random start-up trials; None: the study file's ``n_startup_trials`` (8)."""

    def guard_flipped(self) -> Strategy:
        name = f"{self.name}-noguard" if self.guard else f"{self.name}-guard"
        return dataclasses.replace(self, name=name, guard=not self.guard)


DEFAULT_STRATEGY = "frontier_race_late"
"""What a study file that names no sampler, pruner or seed policy runs when its one objective is held-out gold
(``tuner.study.defaults``; the KL guard is on by default): the frontier search, racing late, since the pre-registered
rule chose it (benchmarks/README.md, "Pre-registered: the tuner on real language"). ``frontier_budget_race_late`` is
the same with its aims held within the study's KL budget (``within_budget``), an option added after the rule chose;
post hoc, on the tables it has seen, it was slower. ``QUICKSTART_STRATEGY`` is
studies/quickstart.yaml's: the same. A change of either default changes these."""
QUICKSTART_STRATEGY = DEFAULT_STRATEGY
JOINT_TPE_STRATEGY = "tpe_multivariate_race_late"
"""Joint TPE racing late: the default before the frontier search, and still that of a study without a held-out gold
objective (``tuner.study.defaults.JOINT_TPE``)."""

BASE = (
    Strategy("random", "random", "none", guard=False),
    Strategy(JOINT_TPE_STRATEGY, "tpe_multivariate", "none", guard=True, seed_policy=LATE_RACE),
    Strategy("tpe_multivariate_median_race_late", "tpe_multivariate", "median", guard=True, seed_policy=LATE_RACE),
    Strategy("tpe_multivariate_unpruned", "tpe_multivariate", "none", guard=True),
    Strategy("tpe_multivariate", "tpe_multivariate", "median", guard=True),
    Strategy("tpe_multivariate_unpruned_s8", "tpe_multivariate", "none", guard=True, startup=8),
    Strategy("tpe_multivariate_s8", "tpe_multivariate", "median", guard=True, startup=8),
    Strategy("tpe_shipped", "tpe", "median", guard=True, warm_starts=True),
    Strategy("gp", "gp", "median", guard=True),
    Strategy("gp_s4", "gp", "median", guard=True, startup=4),
    Strategy("sha_random", "random", "sha", guard=True),
    Strategy("sha_tpe", "tpe", "sha", guard=True),
    Strategy("hyperband_random", "random", "hyperband", guard=True),
    Strategy("hyperband_tpe", "tpe", "hyperband", guard=True),
    Strategy("hyperband_tpe_multivariate", "tpe_multivariate", "hyperband", guard=True),
    Strategy("hyperband_tpe_multivariate_s8", "tpe_multivariate", "hyperband", guard=True, startup=8),
    Strategy("hyperband_gp", "gp", "hyperband", guard=True),
    Strategy("hyperband_tpe_multivariate_race_late", "tpe_multivariate", "hyperband", guard=True,
             seed_policy=LATE_RACE),
    Strategy("racing", "tpe", "median", guard=True, seed_policy=SeedPolicy("racing", seeds=3, top_k=3, start=0.0),
             warm_starts=True),
    Strategy("tpe_multivariate_race2", "tpe_multivariate", "median", guard=True,
             seed_policy=SeedPolicy("racing", seeds=2, top_k=1, start=0.0)),
    Strategy("hyperband_tpe_race2", "tpe", "hyperband", guard=True,
             seed_policy=SeedPolicy("racing", seeds=2, top_k=1, start=0.0)),
    Strategy("tpe_multivariate_race_late_k3_70", "tpe_multivariate", "none", guard=True,
             seed_policy=SeedPolicy("racing", seeds=2, top_k=3, start=0.7)),
    Strategy("tpe_multivariate_race_late_s3", "tpe_multivariate", "none", guard=True,
             seed_policy=SeedPolicy("racing", seeds=3, top_k=2, start=0.7)),
    Strategy(DEFAULT_STRATEGY, "frontier", "none", guard=True, seed_policy=LATE_RACE),
    Strategy("frontier_budget_race_late", "frontier_budget", "none", guard=True, seed_policy=LATE_RACE),
    Strategy("frontier", "frontier", "none", guard=True),
    Strategy("frontier_race_late_s2", "frontier", "none", guard=True, seed_policy=LATE_RACE, startup=2),
    Strategy("frontier_race_late_s3", "frontier", "none", guard=True, seed_policy=LATE_RACE, startup=3),
    Strategy("frontier_gold_race_late", "frontier_gold", "none", guard=True, seed_policy=LATE_RACE),
    Strategy("frontier_gold_race_late_s2", "frontier_gold", "none", guard=True, seed_policy=LATE_RACE, startup=2),
    Strategy("frontier_pilot_race_late_s2", "frontier_pilot", "none", guard=True, seed_policy=LATE_RACE, startup=2),
    Strategy("frontier_pilot_gold_race_late_s2", "frontier_pilot_gold", "none", guard=True, seed_policy=LATE_RACE,
             startup=2),
)
STRATEGIES: dict[str, Strategy] = {s.name: s for base in BASE for s in (base, base.guard_flipped())}
QUICK_STRATEGIES = ("random", DEFAULT_STRATEGY, JOINT_TPE_STRATEGY, "tpe_multivariate_median_race_late", "tpe_shipped",
                    "gp", "sha_tpe", "hyperband_random", "racing")


@dataclass(frozen=True)
class Fidelity:
    """The rungs' scale, from the table: the first evaluation of its longest runs, and their length (updates)."""

    min_resource: int
    max_resource: int


def make_sampler(strategy: Strategy, spec: StudySpec, seed: int) -> optuna.samplers.BaseSampler:
    """The strategy's sampler, seeded with ``seed``."""
    if strategy.startup is not None:
        startup = strategy.startup
    else:
        startup = STARTUP if strategy.sampler == "tpe_multivariate" else OTHER_STARTUP
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if strategy.sampler == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if strategy.sampler.startswith("frontier"):  # run_repeat attaches the repeat's evaluations
            return FrontierSampler(seed=seed, prefer_gold="gold" in strategy.sampler,
                                   pilot=PILOT if "pilot" in strategy.sampler else None,
                                   within_budget="budget" in strategy.sampler,
                                   **({"n_startup_trials": strategy.startup} if strategy.startup else {}))
        if strategy.sampler == "tpe":
            independent = {"name": "tpe", "seed": seed, "n_startup_trials": startup}
            return study_sampler(dataclasses.replace(spec, sampler=independent))
        if strategy.sampler == "tpe_multivariate":
            joint = {**study_defaults.JOINT_TPE, "seed": seed, "n_startup_trials": startup}
            return study_sampler(dataclasses.replace(spec, sampler=joint))
        if strategy.sampler == "gp":
            # The conditional parameters (kl_coef or kl_target) lie outside the GP's intersection space and are drawn
            # at random, which it would warn about at every trial.
            return optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup, warn_independent_sampling=False)
    raise ValueError(f"unknown sampler {strategy.sampler!r}")


def make_pruner(strategy: Strategy, spec: StudySpec, fidelity: Fidelity) -> optuna.pruners.BasePruner:
    """The strategy's pruner; the KL guard is replayed apart from it (``benchmarks.replay.trial``), before it, on every
    update, as the tuner's reporter asks it."""
    if strategy.pruner == "none":
        return optuna.pruners.NopPruner()
    if strategy.pruner == "median":
        inner = study_pruner(dataclasses.replace(spec, pruner=MEDIAN)).inner
        assert inner is not None
        return inner
    if strategy.pruner == "sha":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=fidelity.min_resource,
                                                      reduction_factor=REDUCTION_FACTOR)
    if strategy.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=fidelity.min_resource, max_resource=fidelity.max_resource,
                                              reduction_factor=REDUCTION_FACTOR)
    raise ValueError(f"unknown pruner {strategy.pruner!r}")
