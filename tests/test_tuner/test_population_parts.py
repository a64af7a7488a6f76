"""The population's parts without a run: explore against a slow reference, truncation selection, the plan of a
generation from stored trials, and the study file's population section with its one-line refusals."""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
from helpers.population_trials import BETA, LR, segment_trial
from optuna.trial import FrozenTrial, TrialState

from tuner.population.explore import drawn, perturbed
from tuner.population.heading import forecast_at, heading_past
from tuner.population.lineage import lineage_lines
from tuner.population.plan import plan_generation
from tuner.population.select import Standing, cooling, exploit_plan, ranked
from tuner.production.validation import chosen_trials
from tuner.store.attrs import CONFIG_ATTR, DUPLICATE_OF_ATTR, SPEC_ATTR
from tuner.store.segments import Segment, duplicate_of, generation_ended, generation_slots, horizon, lineage
from tuner.study.population_section import Population, parse_population
from tuner.study.seed_policy import SeedPolicy
from tuner.study.stored_spec import read_stored_spec
from tuner.study.study_file import StudySpecError, parse_study
from tuner.study.winner import read_winner

# --- explore ---------------------------------------------------------------------------------------------------

def test_a_perturbation_multiplies_by_one_of_the_factors_and_stays_in_the_range() -> None:
    rng = random.Random(0)
    seen = {perturbed(1e-4, LR, (0.8, 1.25), 0.0, rng) for _ in range(200)}
    assert sorted(seen) == [pytest.approx(8e-5), pytest.approx(1.25e-4)]
    assert perturbed(9e-4, LR, (1.25,), 0.0, rng) == 1e-3  # clipped at the top
    assert perturbed(1.1e-5, LR, (0.8,), 0.0, rng) == 1e-5  # and at the bottom


def test_a_resample_is_log_uniform_over_the_range_as_a_slow_reference_draws_it() -> None:
    rng, reference = random.Random(3), random.Random(3)
    for _ in range(50):
        value = perturbed(1e-4, LR, (0.8, 1.25), 1.0, rng)
        reference.random()  # the coin that chose to resample
        expected = 10 ** reference.uniform(-5, -3)
        assert value == pytest.approx(expected, rel=1e-12)
    draws = [math.log10(drawn(LR, random.Random(i))) for i in range(2000)]
    assert min(draws) >= -5 and max(draws) <= -3 and abs(sum(draws) / len(draws) + 4) < 0.05


# --- select ----------------------------------------------------------------------------------------------------

def test_members_rank_feasible_completed_first_then_over_a_constraint_then_stopped() -> None:
    standings = [Standing(0, 0.5, True), Standing(1, None, False), Standing(2, 0.9, False), Standing(3, 0.7, True)]
    assert [s.member for s in ranked(standings, maximize=True)] == [3, 0, 2, 1]
    assert [s.member for s in ranked(standings, maximize=False)] == [0, 3, 2, 1]


def test_the_bottom_copy_the_top_and_every_stopped_or_infeasible_member_is_replaced() -> None:
    standings = [Standing(0, 0.9, True), Standing(1, 0.8, True), Standing(2, 0.7, True), Standing(3, 0.6, True),
                 Standing(4, 0.99, False), Standing(5, None, False)]
    plan = exploit_plan(standings, cut=2, margin=0.0, maximize=True, rng=random.Random(0))
    assert plan is not None and set(plan) == {4, 5} and set(plan.values()) <= {0, 1}  # the 2 lowest are 4 and 5
    plan = exploit_plan(standings[:4], cut=1, margin=0.0, maximize=True, rng=random.Random(0))
    assert plan == {3: 0}
    # A donor ahead by no more than the margin is not copied: the member continues.
    assert exploit_plan(standings[:4], cut=1, margin=0.5, maximize=True, rng=random.Random(0)) == {}
    # Nobody feasible and complete: nothing to copy.
    assert exploit_plan([Standing(0, None, False), Standing(1, 0.5, False)], 1, 0.0, True, random.Random(0)) is None


def test_the_cut_is_the_quantile_rounded_up_within_half_the_population() -> None:
    assert [Population(size, 2, quantile).cut for size, quantile in ((8, 0.25), (4, 0.25), (2, 0.5), (10, 0.5),
                                                                       (3, 0.0))] == [2, 1, 1, 5, 1]


# --- heading past the KL budget -----------------------------------------------------------------------------------

def slow_forecast(points: list[tuple[float, float]], horizon: float) -> float:
    """The same line, by numpy's least squares."""
    chosen = ([(0.0, 0.0), *points])[-3:]
    u, k = np.array([p[0] for p in chosen]), np.array([p[1] for p in chosen])
    if np.ptp(u) == 0:
        return float(k.mean())
    slope, intercept = np.polyfit(u, k, 1)
    return float(slope * horizon + intercept)


def test_the_kl_forecast_is_the_least_squares_line_through_the_last_evaluations_and_the_start() -> None:
    rng = random.Random(5)
    for _ in range(100):
        points = sorted((float(rng.randint(1, 40)), rng.uniform(0, 5)) for _ in range(rng.randint(1, 5)))
        assert forecast_at(points, 48) == pytest.approx(slow_forecast(points, 48), abs=1e-9)
    assert forecast_at([(12, 1.0)], 48) == pytest.approx(4.0)  # from the origin through update 12's KL
    assert heading_past([(12, 1.5)], 48, 5.0) and not heading_past([(12, 1.0)], 48, 5.0)
    assert not heading_past([(12, 1.0), (24, 2.0), (36, 2.2)], 48, 5.0)  # a trend that flattens


def test_a_member_heading_past_the_budget_cools_its_own_line_and_is_never_copied() -> None:
    trials = first_generation()  # values 0.5, 0.9, pruned, 0.7: member 1 leads
    population = Population(size=4, segment=2, quantile=0.25, mutate=("learning_rate", "kl_coef"), resample=0.0)
    planned = plan_generation(trials, 0, population, {"learning_rate": LR, "kl_coef": BETA}, 6, maximize=True,
                              heading={1})
    assert planned is not None
    by_member = {p.segment.member: p for p in planned}
    # The leader, forecast over the budget, continues its own line with its learning rate lowered and its KL
    # coefficient raised by the extreme factors; the pruned member copies the best member not heading there.
    cooled = by_member[1]
    assert (cooled.segment.origin, cooled.segment.parent) == ("cool", 1)
    assert cooled.segment.mutated == {"learning_rate": (2e-4, pytest.approx(1.6e-4)),
                                      "kl_coef": (0.1, pytest.approx(0.125))}
    assert cooled.config["learning_rate_schedule"] == [[3, pytest.approx(1.6e-4)]]
    assert (by_member[2].segment.origin, by_member[2].segment.parent) == ("exploit", 3)
    assert all(p.segment.parent != 1 for p in planned if p.segment.origin == "exploit")
    # With perturbations off (a selection-only population) a cooled line keeps its values.
    still = plan_generation(trials, 0, dataclasses.replace(population, perturb=(1.0,)),
                            {"learning_rate": LR, "kl_coef": BETA}, 6, maximize=True, heading={1})
    assert still is not None and still[1].config["learning_rate_schedule"] == [[3, 2e-4]]


def test_only_where_every_live_member_heads_past_the_budget_do_they_donate() -> None:
    standings = [Standing(0, 0.9, True, heading=True), Standing(1, 0.8, True, heading=True), Standing(2, None, False)]
    plan = exploit_plan(standings, cut=1, margin=0.0, maximize=True, rng=random.Random(0))
    assert plan == {2: 0} and cooling(standings, plan) == [0, 1]


# --- plan ------------------------------------------------------------------------------------------------------

def first_generation() -> list[FrozenTrial]:
    configs = [{"learning_rate": lr, "kl_coef": 0.1} for lr in (1e-4, 2e-4, 3e-4, 4e-4)]
    return [segment_trial(m, Segment(m, 0, 0, 2), value, configs[m],
                          state=TrialState.PRUNED if value is None else TrialState.COMPLETE)
            for m, value in enumerate((0.5, 0.9, None, 0.7))]


def test_a_generation_is_planned_from_how_the_last_one_ended() -> None:
    trials = first_generation()  # member 2 was pruned
    population = Population(size=4, segment=2, quantile=0.5, mutate=("learning_rate", "kl_coef"), resample=0.0)
    assert generation_ended(trials, 0, 4) and horizon(trials) == 6
    planned = plan_generation(trials, 0, population, {"learning_rate": LR, "kl_coef": BETA}, 6, maximize=True)
    assert planned is not None
    by_member = {p.segment.member: p for p in planned}
    # Member 2 (pruned) and member 0 (the lowest of the rest) copy one of the cut of two at the top, 1 and 3.
    for member in (0, 2):
        p = by_member[member]
        assert p.segment.origin == "exploit" and p.segment.parent in (1, 3)
        assert (p.segment.start, p.segment.stop) == (2, 4)
        donor = trials[p.segment.parent].user_attrs[CONFIG_ATTR]
        old, new = p.segment.mutated["learning_rate"]
        assert old == donor["learning_rate"] and p.config["learning_rate"] == old  # the donor's config, extended
        assert p.config["learning_rate_schedule"] == [[3, new]] and p.params["learning_rate"] == new
        assert new in (pytest.approx(0.8 * old), pytest.approx(1.25 * old))
        assert p.config["kl_coef_schedule"] == [[3, p.segment.mutated["kl_coef"][1]]]
    # Two copies of one donor are given different values.
    if by_member[0].segment.parent == by_member[2].segment.parent:
        assert by_member[0].segment.mutated != by_member[2].segment.mutated
    for member in (1, 3):
        assert by_member[member].segment.origin == "continue" and by_member[member].config == trials[member] \
            .user_attrs[CONFIG_ATTR]
    # Any worker plans the same generation.
    assert plan_generation(trials, 0, population, {"learning_rate": LR, "kl_coef": BETA}, 6, True) == planned


def test_two_copies_of_one_donor_are_never_given_the_same_values() -> None:
    population = Population(size=4, segment=2, quantile=0.25, mutate=("learning_rate",), resample=0.0)
    trials = first_generation()
    trials[3] = segment_trial(3, Segment(3, 0, 0, 2), None, {"learning_rate": 4e-4, "kl_coef": 0.1},
                              state=TrialState.FAIL)
    for seed in range(10):  # the pruned (member 2) and the failed (member 3) both copy the one donor, member 1
        planned = plan_generation(trials, 0, dataclasses.replace(population, seed=seed),
                                  {"learning_rate": LR}, 6, maximize=True)
        assert planned is not None
        copies = [p for p in planned if p.segment.origin == "exploit"]
        assert [p.segment.parent for p in copies] == [1, 1]
        assert sorted(p.params["learning_rate"] for p in copies) == [pytest.approx(1.6e-4), pytest.approx(2.5e-4)]


def test_a_copy_reads_the_value_in_force_from_the_donors_schedule_and_keeps_its_earlier_pairs() -> None:
    config = {"learning_rate": 1e-4, "kl_coef": 0.1, "learning_rate_schedule": [[3, 2e-4]]}
    trials = [segment_trial(m, Segment(m, 1, 2, 4, "continue", parent=m), value, dict(config))
              for m, value in enumerate((0.9, 0.1))]
    population = Population(size=2, segment=2, mutate=("learning_rate",), perturb=(0.5,), resample=0.0)
    planned = plan_generation(trials, 1, population, {"learning_rate": LR}, 6, maximize=True)
    assert planned is not None
    copy = next(p for p in planned if p.segment.member == 1)
    assert copy.segment.mutated == {"learning_rate": (2e-4, 1e-4)}
    assert copy.config["learning_rate_schedule"] == [[3, 2e-4], [5, 1e-4]]


def test_the_latest_attempt_fills_a_slot_and_a_duplicate_counts_for_nothing() -> None:
    trials = first_generation()
    config = {"learning_rate": 1e-4, "kl_coef": 0.1}
    retry = segment_trial(7, Segment(0, 0, 0, 2), 0.6, config)
    twin = segment_trial(8, Segment(1, 0, 0, 2), 0.1, config, TrialState.COMPLETE, attrs={DUPLICATE_OF_ATTR: 1})
    assert generation_slots([*trials, retry, twin], 0)[0].number == 7
    assert generation_slots([*trials, retry, twin], 0)[1].number == 1
    fresh = segment_trial(9, Segment(3, 0, 0, 2), None, config, state=TrialState.WAITING)
    assert duplicate_of([*trials, fresh], fresh) == 3
    failed = segment_trial(3, Segment(3, 0, 0, 2), None, config, state=TrialState.FAIL)
    assert duplicate_of([*trials[:3], failed, fresh], fresh) is None  # a failed attempt's retry repeats nothing


def test_a_lineage_reads_back_from_the_last_segment_and_is_said_in_words() -> None:
    config = {"learning_rate": 1e-4, "kl_coef": 0.1}
    first = segment_trial(0, Segment(0, 0, 0, 2), 0.5, config)
    copy = segment_trial(5, Segment(1, 1, 2, 4, "exploit", parent=0, mutated={"learning_rate": (1e-4, 8e-5)}),
                         0.6, config)
    last = segment_trial(9, Segment(1, 2, 4, 6, "continue", parent=5), 0.7, config)
    assert [t.number for t, _ in lineage([first, copy, last], last)] == [0, 5, 9]
    assert lineage_lines([first, copy, last], last) == [
        "lineage of trial 9 (member 1):", "  updates 1-2 trial 0, started by the sampler",
        "  updates 3-4 trial 5, copied trial 0 at update 2: learning_rate 0.0001 -> 8e-05",
        "  updates 5-6 trial 9, its own line"]


# --- the study file ---------------------------------------------------------------------------------------------

def study_mapping() -> dict[str, Any]:
    return study()


def study(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "pbt", "objectives": [{"metric": "eval/judge_score", "reduce": "last"}],
        "base": {"task": "shortest_path_tiny", "eval_steps": 2, "judge_funcs": ["judge_functions:word_count"]},
        "search_space": {"learning_rate": {"type": "float", "low": 1e-5, "high": 1e-3, "log": True},
                         "kl_coef": {"type": "float", "low": 0.01, "high": 0.5, "log": True}},
        "population": {"size": 4, "segment": 2},
    }
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def test_a_population_section_defaults_to_perturbing_every_searched_knob_a_schedule_can_change() -> None:
    population = parse_population({"size": 8, "segment": 6}, {"learning_rate": LR, "kl_coef": BETA},
                                  "eval/gold_score")
    assert population == Population(8, 6, mutate=("learning_rate", "kl_coef"))
    assert population is not None and population.backtrack == 0.0  # off unless asked for
    assert parse_population(None, {}, "objective/scores") is None


@pytest.mark.parametrize(("section", "message"), [
    ({"size": 1, "segment": 2}, "population.size: expected a whole number >= 2, got 1"),
    ({"segment": 2}, "population.size: expected a whole number >= 2, got null"),
    ({"size": 4, "segment": 0}, "population.segment: expected a whole number >= 1, got 0"),
    ({"size": 4, "segment": 2, "quantile": 0.7}, "population.quantile: expected a number in [0, 0.5], got 0.7"),
    ({"size": 4, "segment": 2, "mutate": ["cliprange"]}, "population.mutate: cliprange cannot change mid-run"),
    ({"size": 4, "segment": 2, "mutate": ["beta"]}, "population.mutate: beta must be searched as a float range"),
    ({"size": 4, "segment": 2, "perturb": [0.8, -1]}, "population.perturb: expected a list of positive factors"),
    ({"size": 4, "segment": 2, "speed": 1}, "population.speed: unknown key"),
    ({"size": 4, "segment": 2, "backtrack": 1.5}, "population.backtrack: expected a number in [0, 1], got 1.5"),
    ({"size": 4, "segment": 2, "backtrack": True}, "population.backtrack: expected a number in [0, 1], got true"),
])
def test_a_wrong_population_section_is_refused_in_one_line(section: dict[str, Any], message: str) -> None:
    with pytest.raises(StudySpecError) as raised:
        parse_population(section, {"learning_rate": LR, "kl_coef": BETA}, "eval/judge_score")
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)


@pytest.mark.parametrize(("changes", "message"), [
    ({"objectives": [{"metric": "objective/scores"}]}, "population: members are ranked on the first objective, "
                                                       "which must be a held-out judge"),
    ({"seed_policy": {"name": "racing"}}, "seed_policy: a population ranks its members at every segment"),
    ({"n_trials": 12}, "n_trials: a population study trains its members to the run's horizon"),
    ({"population": {"size": 4, "segment": 3}}, "population.segment: every segment's end must be evaluated"),
    ({"population": {"size": 4, "segment": 2, "mutate": ["kl_coef"]},
      "search_space": {"kl_coef": {"type": "float", "low": 0.01, "high": 0.5},
                       "kl_in_reward": {"type": "categorical", "choices": [True, False]}}},
     "population.mutate: kl_coef cannot be perturbed where the KL placement or an adaptive KL controller is"),
    ({"search_space": {"learning_rate": {"type": "float", "low": 1e-5, "high": 1e-3},
                       "rollout_batch_size": {"type": "categorical", "choices": [16, 32]}}},
     "population: searched rollout_batch_size changes how many updates a run makes"),
    ({"population": {"size": 2, "segment": 2},
      "enqueue": [{"learning_rate": 1e-4 * i, "kl_coef": 0.1} for i in (1, 2, 3)]},
     "population.size: 2 members cannot start from 3 warm starts"),
])
def test_a_population_that_cannot_work_with_the_rest_of_the_study_is_refused_in_one_line(
    changes: dict[str, Any], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent.parent))  # the judge functions' module
    with pytest.raises(StudySpecError) as raised:
        parse_study(study(**changes), tmp_path / "pbt.yaml")
    assert str(raised.value).startswith(message), str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_population_study_parses_and_keeps_its_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent.parent))
    spec = parse_study(study(), tmp_path / "pbt.yaml")
    assert spec.population == Population(4, 2, mutate=("learning_rate", "kl_coef"))
    assert spec.seed_policy.name == "single" and spec.n_trials is None
    assert optuna  # the module's storage types are what the plan reads


def test_a_populations_winner_and_ranking_are_its_last_generations_members_only() -> None:
    # A first segment scored higher at its update than any whole run did at the end: neither best nor validate
    # may choose it (a stored population spec read as racing by default did, and validate replayed a first segment).
    study = optuna.create_study(direction="maximize")
    study.set_user_attr(SPEC_ATTR, {**study_mapping(), "objectives": [{"metric": "eval/judge_score"}]})
    config = {"learning_rate": 1e-4, "kl_coef": 0.1}
    trials = [segment_trial(0, Segment(0, 0, 0, 2), 0.9, config), segment_trial(1, Segment(1, 0, 0, 2), 0.5, config),
              segment_trial(2, Segment(0, 1, 2, 4, "continue", parent=0), 0.3, {**config, "learning_rate": 2e-4}),
              segment_trial(3, Segment(1, 1, 2, 4, "continue", parent=1), 0.4, config)]
    for trial in trials:
        study.add_trial(trial)
    assert read_stored_spec(study.user_attrs, 1).seed_policy == SeedPolicy()
    winner = read_winner(study)
    assert winner.best is not None and winner.best.number == 3
    assert [t.number for t in winner.ranked] == [3, 2] and [t.number for t in chosen_trials(study, 2)] == [3, 2]
