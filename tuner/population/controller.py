"""The population's clock: it queues each generation once the one before it has ended, and keeps workers that have
nothing to run waiting for it, on the study's own storage (no scheduler of its own, no Ray Tune).

- A new population study queues its first generation: one trial per member, its parameters left to the sampler (a
  warm start's where the study file gives some), as :func:`queue_first_generation` does from ``open_study``.
- :class:`PopulationController` is an ``optimize`` callback. When a segment ends and with it the last of its
  generation, it queues the next generation (:mod:`tuner.population.plan`) for every member that has no trial of it
  yet, removes the checkpoints nothing can reach any more (but the elite's, the best earlier segment end, where
  the population backtracks: :mod:`tuner.population.backtrack`), and stops the study once the last generation has
  ended or no member is left to copy. Generations are synchronous: every member is ranked at the same update.
- Then, where nothing is queued, it waits: a worker whose segment ended first would otherwise start a trial of its
  own. While it waits it fails the trials of workers that died (their heartbeats stopped), so that their segments are
  queued again rather than waited for.

Two workers can see a generation end at the same moment and both queue the next; the second copy of a segment finds
the first at its start and stops, marked a duplicate (``tuner.store.segments.duplicate_of``), and is never counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import optuna
import pandas as pd
import sqlalchemy
from optuna.trial import FrozenTrial, TrialState

from ppo_core.metric_names import EVAL_KL, EVAL_SCORE
from tuner.population.backtrack import elite, segment_ends
from tuner.population.checkpoints import remove_unreachable_checkpoints
from tuner.population.heading import heading_past
from tuner.population.plan import plan_generation
from tuner.search.space import ParamSpec
from tuner.store.attrs import CONFIG_ATTR, POPULATION_ATTR, WARM_START_ATTR
from tuner.store.database import create_engine
from tuner.store.records import read_metrics
from tuner.store.segments import (
    ENDED,
    Segment,
    generation_ended,
    generation_slots,
    horizon,
    last_generation,
    segment_of,
)
from tuner.study.population_section import Population
from tuner.study.reduction import Reduction, reduce_history
from tuner.trial.interrupts import interruptible

POLL_SECONDS = 1.0
T = TypeVar("T")
EXTINCT = "population_extinct"
"""Study user attribute set when a generation left no member to copy: the generation it happened at."""


def queue_first_generation(study: optuna.Study, population: Population) -> list[str]:
    """Queue generation 0 on a new study: the warm starts already queued become its first members, and one trial
    with no parameters fixed (the sampler chooses them) is queued for each other member. Lines to print."""
    waiting = sorted(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)), key=lambda t: t.number)
    if len(waiting) > population.size or any(segment_of(t) is not None for t in study.get_trials(deepcopy=False)):
        return []
    first = population.segment
    for member, trial in enumerate(waiting):  # a warm start's trial is WAITING, and takes attributes until it runs
        study._storage.set_trial_user_attr(trial._trial_id, POPULATION_ATTR, Segment(member, 0, 0, first).as_attr())
    for member in range(len(waiting), population.size):
        study.enqueue_trial({}, user_attrs={POPULATION_ATTR: Segment(member, 0, 0, first).as_attr()},
                            skip_if_exists=False)
    starts = sum(WARM_START_ATTR in t.user_attrs for t in waiting)
    on = "the first objective" if population.exploit_on is None else population.exploit_on
    lines = [f"population: {population.size} members, ranked every {population.segment} updates on {on}" +
             (f"; {starts} of them start from the warm starts" if starts else "")]
    if population.exploit_on == EVAL_SCORE:
        lines.append(f"population: ranked on the proxy {EVAL_SCORE}, a control: members copy whichever member games "
                     "the reward they train on")
    return lines


def _over(study: optuna.Study, trials: Sequence[FrozenTrial]) -> bool:
    """Whether the population has ended: no member was left to copy, or every member's last segment ended at the
    run's horizon."""
    if EXTINCT in study.user_attrs:
        return True
    generation = last_generation(trials)
    slots = generation_slots(trials, generation) if generation >= 0 else {}
    length = horizon(trials)
    return bool(slots) and length is not None and all(t.state in ENDED for t in slots.values()) and \
        all(segment.stop >= length for t in slots.values() if (segment := segment_of(t)) is not None)


def population_over(study: optuna.Study) -> bool:
    """Whether the population study ``study`` has ended (a worker that joins it then has nothing to run)."""
    return _over(study, study.get_trials(deepcopy=False))


class PopulationController:
    """An ``optimize`` callback: queue each generation when the one before has ended; wait while nothing is queued
    (see the module's docstring). ``maximize``: the first objective's direction; ``ranking``: its reduction, which
    a population ranked on another metric (``population.exploit_on``) reduces that metric's history with."""

    def __init__(self, population: Population, space: Mapping[str, ParamSpec], maximize: bool,
                 storage_url: str, kl_budget: float | None = None, poll_seconds: float = POLL_SECONDS,
                 sleep: Callable[[float], None] = time.sleep, ranking: Reduction | None = None) -> None:
        if population.exploit_on is not None and ranking is None:
            raise ValueError("a population ranked on population.exploit_on needs the first objective's reduction")
        self.population = population
        self.ranking = ranking
        self.kl_budget = kl_budget
        self.space = space
        self.maximize = maximize
        self.storage_url = storage_url
        self.poll_seconds = poll_seconds
        self.sleep = sleep
        self._engine: sqlalchemy.Engine | None = None  # made at the first ranking that reads metrics, then kept
        self._heads: dict[int, bool] = {}  # ended segments' trials: whether each is heading past the KL budget
        self._scores: dict[int, float] = {}  # completed segments' trials: their exploit_on metric, reduced

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        while True:
            trials = study.get_trials(deepcopy=False)
            if self._advance(study, trials):
                study.stop()
                return
            if any(t.state == TrialState.WAITING for t in trials):
                return
            with interruptible():  # Ctrl-C ends a worker that waits as it ends one that trains
                self.sleep(self.poll_seconds)
            optuna.storages.fail_stale_trials(study)

    def _advance(self, study: optuna.Study, trials: Sequence[FrozenTrial]) -> bool:
        """Queue what the ended generations call for; whether the population is over (its last generation ended, or
        no member is left to copy, as when every member failed before its first update)."""
        generation = last_generation(trials)
        if _over(study, trials):
            last = generation_slots(trials, generation).values()
            remove_unreachable_checkpoints(study, self.storage_url, trials, [t.number for t in last])
            return True
        if not generation_ended(trials, generation, self.population.size):
            return False
        length = horizon(trials)
        if length is None:  # every member ended before its first update: there is nothing to rank or copy
            study.set_user_attr(EXTINCT, generation)
            return True
        slots = generation_slots(trials, generation)
        heading = self._heading(study.study_name, slots, length)
        scores = self._scored(study.study_name, trials)
        best_earlier = self._elite(study.study_name, trials, generation, length, scores)
        planned = plan_generation(trials, generation, self.population, self.space, length, self.maximize,
                                  {member for member, t in slots.items() if t.number in heading}, best_earlier,
                                  scores)
        if planned is None:
            study.set_user_attr(EXTINCT, generation)
            return True
        have = set(generation_slots(trials, generation + 1))
        for member in planned:
            if member.segment.member not in have:
                study.enqueue_trial(member.params, user_attrs={POPULATION_ATTR: member.segment.as_attr(),
                                                               CONFIG_ATTR: member.config}, skip_if_exists=False)
        keep = [t.number for t in slots.values()] + ([best_earlier.number] if best_earlier is not None else [])
        remove_unreachable_checkpoints(study, self.storage_url, trials, keep)
        return False

    def _elite(self, study_name: str, trials: Sequence[FrozenTrial], generation: int, length: int,
               scores: Mapping[int, float] | None = None) -> FrozenTrial | None:
        """The best segment end of the generations before ``generation`` (:mod:`tuner.population.backtrack`); None
        where the population does not backtrack."""
        if self.population.backtrack == 0:
            return None
        by_number = {t.number: t for t in trials}
        best = elite(segment_ends(trials, generation, scores), self.maximize,
                     lambda number: number in self._heading(study_name, {0: by_number[number]}, length))
        return by_number[best.trial] if best is not None else None

    def _scored(self, study_name: str, trials: Sequence[FrozenTrial]) -> dict[int, float] | None:
        """Each completed segment's ``population.exploit_on`` metric over its lineage's updates, reduced as the first
        objective is (NaN where it never reported it: such a member cannot donate); None where the population ranks
        on its first objective. A trial's score is read once: its rows no longer change."""
        metric = self.population.exploit_on
        if metric is None:
            return None
        assert self.ranking is not None  # __init__ refuses an exploit_on without it
        ranking = self.ranking
        self._read_once(study_name, [t.number for t in trials if t.state == TrialState.COMPLETE and
                                     segment_of(t) is not None], self._scores,
                        lambda rows: reduce_history([value for _, value in _points(rows, metric)], ranking))
        return dict(self._scores)

    def _heading(self, study_name: str, slots: Mapping[int, FrozenTrial], length: int) -> set[int]:
        """The trials among ``slots``' (ended segments) whose held-out KL is forecast to end past the study's KL
        budget (:mod:`tuner.population.heading`); none without a budget. A trial's forecast is read once: its
        rows no longer change."""
        if self.kl_budget is None:
            return set()
        budget = self.kl_budget
        self._read_once(study_name, [t.number for t in slots.values()], self._heads,
                        lambda rows: bool(points := _points(rows, EVAL_KL)) and heading_past(points, length, budget))
        return {t.number for t in slots.values() if self._heads[t.number]}

    def _read_once(self, study_name: str, numbers: Sequence[int], cache: dict[int, T],
                   value_of: Callable[[pd.DataFrame], T]) -> None:
        """``cache[n] = value_of(trial n's stored rows)`` for each of ``numbers`` not yet in ``cache``, in one read:
        an ended segment's rows no longer change."""
        unread = [number for number in numbers if number not in cache]
        if unread:
            self._engine = self._engine or create_engine(self.storage_url)
            frame = read_metrics(self._engine, study_name, unread)
            for number in unread:
                cache[number] = value_of(frame[frame["trial_number"] == number])


def _points(rows: pd.DataFrame, metric: str) -> list[tuple[float, float]]:
    """(update, value) of each of ``rows`` that reported ``metric``."""
    if metric not in rows:
        return []
    return [(float(update), float(value)) for update, value in zip(rows["update"], rows[metric], strict=True)
            if value == value]


__all__ = ["EXTINCT", "PopulationController", "population_over", "queue_first_generation"]
