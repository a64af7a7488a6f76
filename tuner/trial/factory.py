"""Optuna samplers and pruners from a study file's ``sampler`` and ``pruner`` sections (their options were checked as
the file was read: ``tuner.search.options``)."""

from __future__ import annotations

import functools
import warnings
from typing import Any

import numpy as np
import optuna

from ppo_core.metric_names import HELD_OUT_JUDGE_METRICS
from tuner.search.frontier_sampler import FRONTIER_SAMPLER, FrontierSampler, MetricsReader
from tuner.search.options import PRUNER_CLASSES, SAMPLER_CLASSES
from tuner.search.space import ParamSpec
from tuner.store.database import create_engine
from tuner.store.records import read_metrics
from tuner.study.constraints import upper_limit
from tuner.study.spec import StudySpec
from tuner.study.values import StudySpecError
from tuner.trial.kl_guard import KLGuardPruner

MAX_GRID_POINTS = 1_000_000


def _grid(space: dict[str, ParamSpec]) -> dict[str, list[Any]]:
    grid: dict[str, list[Any]] = {}
    for name, spec in space.items():
        if spec.type == "categorical":
            grid[name] = list(spec.choices)
        elif spec.step is not None or spec.type == "int":
            assert spec.low is not None and spec.high is not None  # numeric parameters have both
            step = spec.step or 1
            if (spec.high - spec.low) / step + 1 > MAX_GRID_POINTS:
                raise StudySpecError(f"search_space.{name}: the grid sampler would need more than "
                                     f"{MAX_GRID_POINTS:,} points; raise the step or narrow the range")
            points = np.arange(spec.low, spec.high + step / 2, step)
            grid[name] = [int(p) for p in points] if spec.type == "int" else [float(p) for p in points]
        else:
            raise StudySpecError(f"search_space.{name}: the grid sampler needs choices or a step")
    return grid


def worker_seed(seed: int, worker_index: int, trials_before: int) -> int:
    """The seed of one worker's sampler, from the study's ``seed``, the worker's index on this machine and the trials
    the study held when the worker opened it.

    The first worker of a new study takes the study's seed as it is: a study run from one file on one worker
    proposes what Optuna proposes with that seed. Every other worker, and every worker of a resumed study, draws
    its own: parallel workers with one seed would propose alike, and a resumed sampler reseeded alike would propose
    again the points it drew the first time (its random start-up trials above all). A seed drawn per resume is the
    sound way for every Optuna sampler: they keep no state of their own between processes (what they learn, they
    read back from the study's trials), so nothing but the random stream is lost by drawing a new one, and fast-
    forwarding that stream would need to know how many numbers each earlier proposal took.

    Example::

        worker_seed(0, 0, 0)  # 0
        worker_seed(0, 0, 4) != worker_seed(0, 1, 0) != 0
    """
    if worker_index == 0 and trials_before == 0:
        return seed
    return int(np.random.SeedSequence([seed, worker_index, trials_before]).generate_state(1)[0])


TPE_MEANING: dict[str, bool] = {"multivariate": True, "constant_liar": True}
"""What ``sampler: {name: tpe}`` means, whatever Optuna is installed: TPE modelling the parameters jointly (Optuna
5's default), with the constant liar; a study file may set either otherwise."""


def make_sampler(spec: StudySpec, worker_index: int = 0, trials_before: int = 0) -> optuna.samplers.BaseSampler:
    """The study's sampler for one worker (see :func:`worker_seed`)."""
    options = {k: v for k, v in spec.sampler.items() if k != "name"}
    name = spec.sampler["name"]
    seed = options.get("seed")
    # The frontier sampler's draws come from the study's seed and each trial's number, never a worker's: a resumed
    # study, or another worker, proposes a trial as the first worker would have.
    if seed is not None and name != FRONTIER_SAMPLER:
        if name == "qmc":
            # The QMC sequence goes on where it stopped (Optuna keeps its position in the study): its seed must not
            # change on a resume; the random sampler it uses outside the sequence must.
            options["seed"] = worker_seed(seed, worker_index, 0)
            options["independent_sampler"] = optuna.samplers.RandomSampler(
                seed=worker_seed(seed, worker_index, trials_before))
        else:
            options["seed"] = worker_seed(seed, worker_index, trials_before)
    if name == "tpe":
        # Every option whose default Optuna changed is set, so that a study file means one search on every
        # install: Optuna 5.0 made TPE multivariate with a constant liar, where 4.x modelled each parameter alone.
        # The constant liar keeps parallel workers from proposing the same point.
        for option, value in TPE_MEANING.items():
            options.setdefault(option, value)
    try:
        with warnings.catch_warnings():
            # Optuna marks multivariate/group TPE (the default search, tuner.study.defaults) and GPSampler
            # experimental; a warning at every worker's start about the tool's own default tells the user nothing.
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            if name == "grid":
                return optuna.samplers.GridSampler(_grid(spec.search_space), **options)
            if name == FRONTIER_SAMPLER:
                read, budget = _metrics_reader(spec.storage), upper_limit(spec.constraints)
                judge = spec.objectives[0].metric if len(spec.objectives) == 1 else None
                return FrontierSampler(**options).attach(spec.search_space, spec.base, read, budget,
                                                         judge if judge in HELD_OUT_JUDGE_METRICS else None)
            return SAMPLER_CLASSES[name](**options)
    except (TypeError, ValueError) as error:
        raise StudySpecError(f"sampler: {error}") from None


def _metrics_reader(storage: str) -> MetricsReader:
    """The frontier sampler's read of a study's evaluations. It opens the storage at its first read, not here: the
    sampler is made before anything is created, and a bad option must leave no database behind."""
    engine = functools.cache(lambda: create_engine(storage))
    return lambda study_name: read_metrics(engine(), study_name)


def make_search(spec: StudySpec, worker_index: int = 0) -> tuple[KLGuardPruner, optuna.samplers.BaseSampler]:
    """The study's pruner and its sampler for one worker of a new study: what a worker builds before it creates or
    loads anything, so that a bad option creates nothing."""
    return make_pruner(spec), make_sampler(spec, worker_index)


def make_pruner(spec: StudySpec) -> KLGuardPruner:
    """The KL guard, wrapping the reward-based pruner the study names (if any)."""
    options = {k: v for k, v in spec.pruner.items() if k != "name"}
    name = spec.pruner["name"]
    inner = None
    if name != "none":
        try:
            inner = PRUNER_CLASSES[name](**options)
        except (TypeError, ValueError) as error:
            raise StudySpecError(f"pruner: {error}") from None
    return KLGuardPruner(spec.kl_guard, inner)
