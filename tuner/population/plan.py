"""The next generation of a population, planned from how the last one ended: for each member, the segment it trains
next, the config it trains it with and the parameters it records.

A member that continues keeps its own config; one that cools (heading past the KL budget:
:mod:`tuner.population.select`) adds pairs to its own schedules: its learning rate times the smallest factor of
``perturb``, its KL coefficient times the largest. A member that copies a donor takes the donor's config and adds,
for each knob in ``mutate``, a pair ``[start + 1, new value]`` to the knob's schedule (``learning_rate_schedule``,
``kl_coef_schedule``), the new value perturbed from the one in force at the donor's last update
(:mod:`tuner.population.explore`). Its recorded parameters are the donor's with the perturbed knobs' new values: the
knobs in force during the segment. Two recipients of one donor are never given the same values (a copy trained on
the same data and streams would be the same run twice): a repeat is drawn again.

A member that goes back to the elite (``backtrack``: :mod:`tuner.population.backtrack`) copies it as it would a
donor, from the elite's end: its segment starts at the elite's last update and trains to the generation's stop, its
config the elite's with the perturbed pairs from the elite's update + 1 on, drawn again where they repeat a segment
already forked from that end (the elite's own continuation, an earlier copy of it). Where a generation leaves no
member to copy (every one stopped, failed or over a constraint), a backtracking population sends every member back to
the elite rather than end: the point where it last stood highest inside the budget.

The plan is drawn from a stream seeded by the population's seed and the generation, so any worker that plans a
generation plans the same one.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optuna.trial import FrozenTrial

from ppo_core.config.schedules import value_at
from tuner.population.backtrack import ahead, ranking_value
from tuner.population.explore import perturbed
from tuner.population.select import Standing, cooling, donors, exploit_plan
from tuner.search.space import ParamSpec
from tuner.store.attrs import CONFIG_ATTR
from tuner.store.segments import COPIES, Origin, Segment, generation_slots, segment_of
from tuner.study.constraints import feasible
from tuner.study.population_section import SCHEDULED, Population

REDRAWS = 20
"""Draws a recipient gets for values no other recipient of its donor has, before it takes a repeat."""


@dataclass(frozen=True)
class Planned:
    """One member's next segment: what to queue."""

    segment: Segment
    params: dict[str, Any]
    config: dict[str, Any]


def standing(member: int, trial: FrozenTrial, heading: bool = False,
             scores: Mapping[int, float] | None = None) -> Standing:
    """How ``trial``'s segment ended, for ranking (on its first objective, or on ``scores``: see
    :func:`~tuner.population.backtrack.ranking_value`); ``heading``: it keeps the KL budget now but is forecast to
    end past it (:mod:`tuner.population.heading`), and ranks as if over it."""
    value = ranking_value(trial, scores)
    return Standing(member, value, value is not None and feasible(trial), heading)


def _perturb_config(config: Mapping[str, Any], params: Mapping[str, Any], population: Population,
                    space: Mapping[str, ParamSpec], start: int, rng: random.Random,
                    cool: bool = False) -> tuple[dict[str, Any], dict[str, Any], dict[str, tuple[float, float]]]:
    """The donor's config and params with each mutated knob perturbed from update ``start + 1`` on; ``cool``: the
    learning rate times the smallest factor and the KL coefficient times the largest, clipped to their ranges."""
    config, params = dict(config), dict(params)
    mutated: dict[str, tuple[float, float]] = {}
    for name in population.mutate:
        schedule_field = SCHEDULED[name]
        in_force = value_at(config.get(schedule_field), float(config[name]), start)
        if cool:
            factor = min(population.perturb) if name == "learning_rate" else max(population.perturb)
            new = perturbed(in_force, space[name], (factor,), 0.0, rng)
        else:
            new = perturbed(in_force, space[name], population.perturb, population.resample, rng)
        pairs = [list(pair) for pair in config.get(schedule_field) or () if pair[0] <= start]
        config[schedule_field] = [*pairs, [start + 1, new]]
        params[name] = new
        mutated[name] = (in_force, new)
    return config, params, mutated


def plan_generation(trials: Sequence[FrozenTrial], generation: int, population: Population,
                    space: Mapping[str, ParamSpec], horizon: int, maximize: bool,
                    heading: Collection[int] = (), elite: FrozenTrial | None = None,
                    scores: Mapping[int, float] | None = None) -> list[Planned] | None:
    """Generation ``generation + 1`` of the population, planned from ``generation``'s ended segments. ``horizon``:
    the run's length in updates; ``heading``: the members forecast to end past the study's KL budget; ``elite``: the
    best earlier segment end of any lineage (:mod:`tuner.population.backtrack`), which a recipient goes back to with
    probability ``population.backtrack`` while it is ahead of the best donor. Where no member may donate (every one
    stopped or over a constraint), every member goes back to the elite if the population backtracks and has one;
    else None: the population has nothing left to copy. ``scores``: what the members are ranked on where it is not
    their first objective (:func:`~tuner.population.backtrack.ranking_value`)."""
    slots = generation_slots(trials, generation)
    rng = random.Random(f"{population.seed}-{generation}")
    standings = [standing(member, trial, member in heading, scores) for member, trial in sorted(slots.items())]
    plan = exploit_plan(standings, population.cut, population.margin, maximize, rng)
    rescue = plan is None and elite is not None and population.backtrack > 0
    if plan is None and not rescue:
        return None
    plan = plan or {}
    cooled = set(cooling(standings, plan))
    start = next(segment.stop for t in slots.values() if (segment := segment_of(t)) is not None)
    stop = min(start + population.segment, horizon)
    best = None if rescue else donors(standings, population.cut, maximize)[0].value
    held = ranking_value(elite, scores) if elite is not None and population.backtrack > 0 else None
    back = elite if rescue or (held is not None and best is not None and
                               ahead(held, best, population.margin, maximize)) else None
    planned: list[Planned] = []
    taken = _forks(trials, back, population) if back is not None else set()
    for member, trial in sorted(slots.items()):
        donor, fork = trial, start
        origin: Origin = "continue"
        if rescue or member in plan:
            if not rescue:
                donor, origin = slots[plan[member]], "exploit"
            if back is not None and (rescue or rng.random() < population.backtrack):
                fork = _stop(back)
                donor, origin = back, "backtrack"
        elif member in cooled:
            origin = "cool"
        config, params = donor.user_attrs[CONFIG_ATTR], dict(donor.params)
        mutated: dict[str, tuple[float, float]] = {}
        if origin == "cool":
            config, params, mutated = _perturb_config(config, params, population, space, fork, rng, cool=True)
        elif origin in COPIES:
            for _ in range(REDRAWS):
                new_config, new_params, mutated = _perturb_config(config, params, population, space, fork, rng)
                values = tuple(new for _, new in mutated.values())
                if (donor.number, values) not in taken:
                    break
            taken.add((donor.number, values))
            config, params = new_config, new_params
        segment = Segment(member, generation + 1, fork, stop, origin, donor.number, mutated)
        planned.append(Planned(segment, params, dict(config)))
    return planned


def _forks(trials: Sequence[FrozenTrial], elite: FrozenTrial,
           population: Population) -> set[tuple[int, tuple[float, ...]]]:
    """(the elite's number, the mutated knobs' values) of every segment already forked from the elite's end: its own
    continuation and every copy of it; a recipient that goes back there draws values none of them has, or it would
    repeat that segment's run."""
    config, stop = elite.user_attrs[CONFIG_ATTR], _stop(elite)
    forks = set()
    for trial in trials:
        segment = segment_of(trial)
        if segment is None or segment.parent != elite.number or segment.start != stop:
            continue
        values = tuple(segment.mutated[name][1] if name in segment.mutated else
                       value_at(config.get(SCHEDULED[name]), float(config[name]), stop) for name in population.mutate)
        forks.add((elite.number, values))
    return forks


def _stop(trial: FrozenTrial) -> int:
    segment = segment_of(trial)
    assert segment is not None  # the elite is a segment's trial
    return segment.stop


__all__ = ["Planned", "plan_generation", "standing"]
