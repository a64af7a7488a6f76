"""Backtracking without a training run: the elite (the best earlier segment end of any lineage) against a slow
reference, a generation planned to go back to it, its lineage in words, and a population on real Optuna storage whose
controller sends a recipient back, keeps the elite's checkpoint and removes it once a better elite replaces it."""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path
from typing import Any

import optuna
import pytest
from helpers.population_trials import BETA, LR, segment_trial
from optuna.trial import FrozenTrial, TrialState

from tuner.population.backtrack import SegmentEnd, ahead, elite, segment_ends
from tuner.population.checkpoints import remove_unreachable_checkpoints
from tuner.population.controller import EXTINCT, PopulationController
from tuner.population.lineage import lineage_lines, population_line
from tuner.population.plan import plan_generation
from tuner.store.attrs import BUDGET_ATTR, CONFIG_ATTR
from tuner.store.database import create_engine
from tuner.store.records import TrialStore, create_tables, read_metrics
from tuner.store.segments import Segment, segment_of
from tuner.study.population_section import Population
from tuner.trial.checkpoints import trial_checkpoints

SPACE = {"learning_rate": LR, "kl_coef": BETA}
BACKTRACKING = Population(size=2, segment=2, quantile=0.5, mutate=("learning_rate", "kl_coef"), resample=0.0,
                          backtrack=1.0)


# --- the elite ---------------------------------------------------------------------------------------------------

def slow_elite(ends: list[SegmentEnd], maximize: bool, heading: set[int]) -> SegmentEnd | None:
    """Every end read: the feasible, finite, not heading; the best value; of those the latest end; the lowest trial."""
    fit = [e for e in ends if e.feasible and e.value is not None and math.isfinite(e.value) and e.trial not in heading]
    if not fit:
        return None
    best = max(e.value if maximize else -e.value for e in fit if e.value is not None)
    tied = [e for e in fit if e.value is not None and (e.value if maximize else -e.value) == best]
    latest = max(e.stop for e in tied)
    return min((e for e in tied if e.stop == latest), key=lambda e: e.trial)


def test_the_elite_is_the_best_live_end_not_heading_past_the_budget_as_a_slow_reference_finds_it() -> None:
    rng = random.Random(11)
    for _ in range(400):
        # Values on a coarse grid, so that ties happen; some not complete (None), one diverged (nan).
        ends = [SegmentEnd(n, 2 * rng.randint(1, 5), rng.choice([None, math.nan, *(i / 10 for i in range(6))]),
                           rng.random() < 0.8) for n in range(rng.randint(0, 10))]
        heading = {e.trial for e in ends if rng.random() < 0.3}
        for maximize in (True, False):
            asked: list[int] = []

            def heads(trial: int, asked: list[int] = asked, heading: set[int] = heading) -> bool:
                asked.append(trial)
                return trial in heading

            assert elite(ends, maximize, heads) == slow_elite(ends, maximize, heading)
            # The forecast (a read of the trial's KL) is asked best first, once each, and only until one is not
            # heading past the budget: every trial asked before the last is heading there.
            assert len(asked) == len(set(asked)) and all(trial in heading for trial in asked[:-1])


def test_a_recipient_goes_back_only_for_a_gain_of_at_least_the_margin() -> None:
    assert ahead(0.8, 0.7, 0.0, maximize=True) and not ahead(0.7, 0.7, 0.0, maximize=True)  # a tie copies a donor
    assert not ahead(0.75, 0.7, 0.1, maximize=True) and ahead(0.85, 0.7, 0.1, maximize=True)
    assert ahead(0.6, 0.7, 0.0, maximize=False) and not ahead(0.8, 0.7, 0.0, maximize=False)


# --- the plan ----------------------------------------------------------------------------------------------------

FIRST = {"learning_rate": 1e-4, "kl_coef": 0.1}


def fallen(horizon: int = 6) -> list[FrozenTrial]:
    """Member 0 peaked at update 2 (0.9) and fell to 0.6 by update 4; member 1 copied it and fell further, 0.4."""
    run = {BUDGET_ATTR: horizon}
    return [segment_trial(0, Segment(0, 0, 0, 2), 0.9, dict(FIRST), attrs=run),
            segment_trial(1, Segment(1, 0, 0, 2), 0.5, {**FIRST, "learning_rate": 4e-4}, attrs=run),
            segment_trial(2, Segment(0, 1, 2, 4, "continue", 0), 0.6, dict(FIRST), attrs=run),
            segment_trial(3, Segment(1, 1, 2, 4, "exploit", 0, {"learning_rate": (1e-4, 8e-5)}), 0.4,
                          {**FIRST, "learning_rate_schedule": [[3, 8e-5]]}, attrs=run)]


def test_a_recipient_goes_back_to_the_best_earlier_end_when_the_generation_fell_below_it() -> None:
    trials = fallen()
    ends = segment_ends(trials, before=1)
    chosen = elite(ends, maximize=True, heading=lambda trial: False)
    assert chosen is not None and chosen.trial == 0
    planned = plan_generation(trials, 1, BACKTRACKING, SPACE, 6, maximize=True, elite=trials[0])
    assert planned is not None
    kept, back = planned
    assert (kept.segment.origin, kept.segment.parent, kept.segment.start, kept.segment.stop) == ("continue", 2, 4, 6)
    # Member 1 restarts from trial 0's checkpoint at update 2 and trains to the generation's stop, 4 updates.
    assert (back.segment.origin, back.segment.parent, back.segment.start, back.segment.stop) == ("backtrack", 0, 2, 6)
    # Its schedule: trial 0's config (not its own line's pair at update 3) with the perturbation from update 3 on.
    for name, schedule in (("learning_rate", "learning_rate_schedule"), ("kl_coef", "kl_coef_schedule")):
        old, new = back.segment.mutated[name]
        assert old == FIRST[name] and new in (pytest.approx(0.8 * old), pytest.approx(1.25 * old))
        assert back.config[schedule] == [[3, new]] and back.params[name] == new
    assert back.config["learning_rate"] == FIRST["learning_rate"]
    assert lineage_lines([*trials, _queued(4, back)], _queued(4, back))[1:] == [
        "  updates 1-2 trial 0, started by the sampler",
        f"  updates 3-6 trial 4, went back to trial 0's update 2, the best earlier point: learning_rate 0.0001 -> "
        f"{back.segment.mutated['learning_rate'][1]:.3g}, kl_coef 0.1 -> {back.segment.mutated['kl_coef'][1]:.3g}"]
    assert population_line([*trials, _queued(4, back)], 2, None) == \
        "population: 2 members over 3 generations, 1 copies of a better member, 1 back to a better earlier point"


def _queued(number: int, planned: Any) -> FrozenTrial:
    return segment_trial(number, planned.segment, None, planned.config, state=TrialState.WAITING)


@pytest.mark.parametrize(("changes", "elite_value", "why"), [
    ({"backtrack": 0.0}, 0.9, "backtracking off"),
    ({}, 0.6, "the elite only ties the best donor"),
    ({"margin": 0.5}, 0.9, "the elite is ahead by less than the margin"),
])
def test_a_recipient_copies_a_current_donor_where_it_may_not_go_back(changes: dict[str, Any], elite_value: float,
                                                                      why: str) -> None:
    trials = fallen()
    trials[0] = segment_trial(0, Segment(0, 0, 0, 2), elite_value, dict(FIRST))
    planned = plan_generation(trials, 1, dataclasses.replace(BACKTRACKING, **changes), SPACE, 6, maximize=True,
                              elite=trials[0])
    assert planned is not None
    copy = planned[1].segment
    assert (copy.origin, copy.parent, copy.start) in (("exploit", 2, 4), ("continue", 3, 4)), why


def test_a_recipient_that_goes_back_never_repeats_a_fork_already_made_from_that_end() -> None:
    # From trial 0's end, trial 2 continued (learning rate 1e-4) and trial 3 copied it with 8e-5: going back there,
    # member 1 takes the one factor that repeats neither run, whatever the draw.
    population = dataclasses.replace(BACKTRACKING, mutate=("learning_rate",), perturb=(0.8, 1.0, 1.25))
    for seed in range(10):
        planned = plan_generation(fallen(), 1, dataclasses.replace(population, seed=seed), {"learning_rate": LR}, 6,
                                  maximize=True, elite=fallen()[0])
        assert planned is not None
        assert planned[1].segment.mutated == {"learning_rate": (1e-4, pytest.approx(1.25e-4))}


def test_with_a_chance_of_backtracking_some_recipients_go_back_and_some_copy_a_donor() -> None:
    origins = set()
    for seed in range(30):
        planned = plan_generation(fallen(), 1, dataclasses.replace(BACKTRACKING, backtrack=0.5, seed=seed), SPACE,
                                  6, maximize=True, elite=fallen()[0])
        assert planned is not None
        origins.add(planned[1].segment.origin)
    assert origins == {"exploit", "backtrack"}


def test_a_generation_with_no_member_to_copy_goes_back_to_the_elite_if_the_population_backtracks() -> None:
    # Both members of generation 1 were stopped (the KL guard, say): nothing is left to copy but the earlier ends.
    trials = fallen()
    trials[2:] = [segment_trial(t.number, segment, None, t.user_attrs[CONFIG_ATTR], state=TrialState.PRUNED)
                  for t in trials[2:] if (segment := segment_of(t)) is not None]
    assert plan_generation(trials, 1, dataclasses.replace(BACKTRACKING, backtrack=0.0), SPACE, 6, maximize=True,
                           elite=trials[0]) is None  # without backtracking the population ends, as it always has
    assert plan_generation(trials, 1, BACKTRACKING, SPACE, 6, maximize=True, elite=None) is None  # no earlier end
    for chance in (1.0, 0.01):  # every member goes back, whatever the chance a recipient would take
        planned = plan_generation(trials, 1, dataclasses.replace(BACKTRACKING, backtrack=chance), SPACE, 6,
                                  maximize=True, elite=trials[0])
        assert planned is not None
        assert [(p.segment.origin, p.segment.parent, p.segment.start, p.segment.stop) for p in planned] == \
            [("backtrack", 0, 2, 6)] * 2
        values = [tuple(new for _, new in p.segment.mutated.values()) for p in planned]
        assert len(set(values)) == 2  # two forks of one end never train the same run


def test_an_infeasible_or_unfinished_end_is_never_the_elite() -> None:
    trials = fallen()
    trials[0] = segment_trial(0, Segment(0, 0, 0, 2), 0.9, dict(FIRST), constraints={"eval/kl": 0.5})
    trials[1] = segment_trial(1, Segment(1, 0, 0, 2), None, dict(FIRST), state=TrialState.PRUNED)
    assert elite(segment_ends(trials, before=2), maximize=True, heading=lambda trial: False) == \
        SegmentEnd(2, 4, 0.6, True)  # over the KL budget, stopped: the best left is member 0's later end
    assert elite(segment_ends(trials, before=2), True, heading=lambda trial: trial == 2) == SegmentEnd(3, 4, 0.4, True)


# --- on real storage: the controller, the rows and the checkpoints -------------------------------------------------

class StoredPopulation:
    """A population study in SQLite, its trials added as the tuner records them, each with a checkpoint directory and
    metric rows (its lineage's up to its start, then its own), so that its controller runs on real storage."""

    def __init__(self, tmp_path: Path) -> None:
        self.url, self.name = f"sqlite:///{tmp_path / 'pbt.db'}", "pbt"
        self.study = optuna.create_study(study_name=self.name, storage=self.url, direction="maximize")
        self.engine = create_engine(self.url)
        create_tables(self.engine)
        self.controller = PopulationController(BACKTRACKING, SPACE, True, self.url, sleep=lambda _: None)

    def add(self, trial: FrozenTrial) -> None:
        self.study.add_trial(trial)
        self.ended(self.study.get_trials(deepcopy=False)[-1])

    def ended(self, trial: FrozenTrial) -> None:
        segment = segment_of(trial)
        assert segment is not None
        store = TrialStore(self.engine, self.name, trial._trial_id, trial.number)
        if segment.parent is not None:
            store.copy_from(self.study.trials[segment.parent]._trial_id, segment.start)
        for update in range(segment.start + 1, segment.stop + 1):
            store.write_metrics(update, {"episode": 8.0 * update, "objective/scores": trial.number + update / 10})
        checkpoint = trial_checkpoints(self.url, self.name, trial.number) / "checkpoints" / f"checkpoint-{segment.stop}"
        checkpoint.mkdir(parents=True)

    def finish(self, values: dict[int, float]) -> list[FrozenTrial]:
        """Run the queued segments as a worker would, each ending with its member's value; they, by member."""
        done = []
        while any(t.state == TrialState.WAITING for t in self.study.get_trials(deepcopy=False)):
            trial = self.study.ask()
            for param in (LR, BETA):  # the knobs in force, as queued
                assert param.low is not None and param.high is not None
                trial.suggest_float(param.name, param.low, param.high, log=True)
            segment = Segment.from_attr(trial.user_attrs["population"])
            self.study.tell(trial, values[segment.member])
            done.append(self.study.trials[trial.number])
            self.ended(done[-1])
        return sorted(done, key=lambda t: Segment.from_attr(t.user_attrs["population"]).member)

    def rank(self) -> None:
        """The controller, as a worker calls it when a segment ends: it queues the next generation."""
        self.controller(self.study, self.study.trials[-1])

    def checkpoints(self) -> list[int]:
        return sorted(n for n in range(len(self.study.trials)) if trial_checkpoints(self.url, self.name, n).exists())

    def rows(self, number: int) -> list[tuple[int, float]]:
        frame = read_metrics(self.engine, self.name, [number])
        return list(zip(frame["update"].astype(int), frame["objective/scores"], strict=True))


def test_the_controller_sends_a_recipient_back_and_keeps_the_elites_checkpoint_until_a_better_one(
    tmp_path: Path,
) -> None:
    population = StoredPopulation(tmp_path)
    for trial in fallen(horizon=10):  # 5 generations
        population.add(trial)
    population.rank()
    queued = [t for t in population.study.trials if t.state == TrialState.WAITING]
    segments = [segment_of(t) for t in queued]
    assert [(s.member, s.origin, s.parent, s.start, s.stop) for s in segments if s] == [
        (0, "continue", 2, 4, 6), (1, "backtrack", 0, 2, 6)]
    assert queued[1].user_attrs[CONFIG_ATTR]["learning_rate_schedule"][-1][0] == 3
    # Generation 0's checkpoints go but the elite's (trial 0), which the backtracked segment starts from.
    assert population.checkpoints() == [0, 2, 3]
    # Whatever the controller keeps, a queued segment's parent stays: trial 3 alone can go now.
    remove_unreachable_checkpoints(population.study, population.url, population.study.trials, keep=())
    assert population.checkpoints() == [0, 2]

    # The backtracked segment's rows: the elite's lineage's up to update 2 only, then its own from update 3.
    continued, back = population.finish({0: 0.7, 1: 0.95})
    assert population.rows(back.number)[:2] == population.rows(0) and \
        [u for u, _ in population.rows(back.number)] == [1, 2, 3, 4, 5, 6]
    assert population.rows(back.number)[2][1] == pytest.approx(back.number + 0.3)

    # Generation 2 beat every earlier end: nobody goes back; trial 0 is still the elite and keeps its checkpoint.
    population.rank()
    assert {s.origin for t in population.study.trials if (s := segment_of(t)) and s.generation == 3} == \
        {"exploit", "continue"}
    assert population.checkpoints() == [0, continued.number, back.number]

    # Generation 3 fell below trial 5's end: the recipient goes back to it, the better elite, and trial 0 is removed.
    third = population.finish({0: 0.3, 1: 0.2})
    population.rank()
    fourth = [segment_of(t) for t in population.study.trials if t.state == TrialState.WAITING]
    assert [(s.member, s.origin, s.parent, s.start, s.stop) for s in fourth if s] == [
        (0, "continue", third[0].number, 8, 10), (1, "backtrack", back.number, 6, 10)]
    assert population.checkpoints() == [back.number, *(t.number for t in third)]


def test_the_controller_sends_every_member_back_when_a_generation_leaves_none_to_copy(tmp_path: Path) -> None:
    population = StoredPopulation(tmp_path)
    trials = fallen(horizon=10)
    for trial in trials[2:]:  # generation 1 stopped whole (by the KL guard, say)
        trial.state, trial.values = TrialState.PRUNED, None
    for trial in trials:
        population.add(trial)
    population.rank()
    assert EXTINCT not in population.study.user_attrs  # not ended: it goes back to where it stood highest
    queued = [segment_of(t) for t in population.study.trials if t.state == TrialState.WAITING]
    assert [(s.member, s.origin, s.parent, s.start, s.stop) for s in queued if s] == [
        (0, "backtrack", 0, 2, 6), (1, "backtrack", 0, 2, 6)]
    assert 0 in population.checkpoints()  # the elite's checkpoint, which both start from, is kept
