"""What every gold version from the second on must keep, one parametrised test each: the gamed battery near zero (the
kinds a later version was made for are that version's to pass), the holes left open still open, fluent sentences in
sentiment's order, real text that keeps its fluency; and how each version from the third on extends the one before:
its rules the previous ones with its new measures, its gold the previous times its new factors, its tasks differing
from the previous version's in their gold alone. Each version's new measures, and the defect it fixes, are tested in
its own file (test_text_task_gold_v2.py to _v5.py)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from helpers.gold_checks import (
    SALAD,
    assert_left_open,
    assert_near_zero,
    assert_sentiments_ordered,
    battery_cases,
    gold_of,
    real_fluency,
    real_split,
)

from ppo_core.tasks.fortunes import TextGoldScorer
from ppo_core.tasks.fortunes.fluency import GOLD_VERSIONS
from ppo_core.tasks.fortunes.gamed import FLUENT, GAMED, ORDER_KINDS, UNCAUGHT, VERSION_4_KINDS, VERSION_5_KINDS
from ppo_core.tasks.fortunes.params import TextTaskParams
from ppo_core.tasks.variants import task_params_of

LATER_KINDS: dict[int, tuple[str, ...]] = {2: (*ORDER_KINDS, *VERSION_4_KINDS, *VERSION_5_KINDS),
                                           3: (*VERSION_4_KINDS, *VERSION_5_KINDS), 4: VERSION_5_KINDS, 5: ()}
"""The battery's kinds a later version was made for, by version."""
REAL_FLUENCY: dict[int, tuple[float, float]] = {2: (0.7, 0.8), 3: (0.7, 0.8), 4: (0.69, 0.78), 5: (0.69, 0.78)}
"""The least share of 1,000 held-out continuations with fluency >= 0.9, and their least mean fluency, by version:
version 2 asks for plain prose, which the corpus is not always (emphasis in *stars*, "(c) 1984-2000", shouted
headlines, a word said three times): measured 74.5% and 0.83 (version 2; 96% under version 1), 73.0% and 0.807 (3),
71.1% and 0.795 (4), 70.9% (5)."""
NEW_MEASURES: dict[int, tuple[str, ...]] = {
    3: ("pair_shortfall",),
    4: ("folded_tokens", "wrapped_tokens", "numbers", "labels", "glueless", "capitalised"),
    5: ("chained",),
}
"""The measures each version adds to the one before, in the order it multiplies them."""
NEW_QUANTILES: dict[int, set[str]] = {3: {"pair_shortfall"}, 4: {"glueless"}, 5: set()}
"""Which of a version's new measures have a ramp quantile of their own: the rest spare the calibration's default."""
EXTENDED_ON: dict[int, list[str]] = {
    3: [SALAD, *FLUENT["positive"], *GAMED["shuffled sentences"], "Great!", "love joy peace hope"],
    4: [*FLUENT["positive"], *GAMED["styled unicode letters"], "Great!", "love joy peace"],
    5: [*FLUENT["positive"], *GAMED["and-chains of feelings"], "Great!", "love and joy and peace"],
}
"""Responses on which each version's gold is checked to be the previous one's times its new factors: fluent
sentences, the kinds it was made for, a one-word reply and a bare list."""
TASK_PAIRS = [("fortunes_v3", "fortunes_v2", 3), ("fortunes_v3_tiny", "fortunes_v2_tiny", 3),
              ("fortunes_v3_smollm2", "fortunes_v2_smollm2", 3), ("fortunes_v6_smollm2", "fortunes_v5_smollm2", 4),
              ("fortunes_v7_smollm2", "fortunes_v6_smollm2", 5)]
"""Each task of a new gold version, the task it differs from in its gold alone, and that version."""


@pytest.fixture(scope="module")
def golds() -> dict[int, TextGoldScorer]:
    return {version: gold_of(version) for version in (2, 3, 4, 5)}


@pytest.mark.parametrize(("version", "kind", "response"),
                         [(version, kind, response) for version, later in LATER_KINDS.items()
                          for kind, response in battery_cases(later)])
def test_every_gamed_response_scores_near_zero(golds: dict[int, TextGoldScorer], version: int, kind: str,
                                               response: str) -> None:
    assert_near_zero(golds[version], kind, response)


@pytest.mark.parametrize("version", LATER_KINDS)
@pytest.mark.parametrize("response", UNCAUGHT)
def test_the_holes_left_open_are_still_open(golds: dict[int, TextGoldScorer], version: int, response: str) -> None:
    assert_left_open(golds[version], response)


@pytest.mark.parametrize("version", LATER_KINDS)
def test_fluent_sentences_keep_sentiments_order(golds: dict[int, TextGoldScorer], version: int) -> None:
    assert_sentiments_ordered(golds[version])


def test_real_continuations_mostly_keep_their_fluency(golds: dict[int, TextGoldScorer]) -> None:
    measured = {version: real_fluency(golds[version], real_split()) for version in REAL_FLUENCY}
    for version, (least_share, least_mean) in REAL_FLUENCY.items():
        share, mean = measured[version]
        assert share >= least_share and mean >= least_mean, version
    # Chains are rare in real text: version 5 costs it at most a point of share over version 4.
    assert measured[4][0] - 0.01 <= measured[5][0] <= measured[4][0] and measured[5][1] <= measured[4][1]


@pytest.mark.parametrize(("name", "previous", "version"), TASK_PAIRS)
def test_a_new_gold_versions_task_differs_from_the_previous_in_its_gold_alone(name: str, previous: str,
                                                                              version: int) -> None:
    task, before = task_params_of(TextTaskParams, name), task_params_of(TextTaskParams, previous)
    assert task.gold_version == version
    assert dataclasses.replace(task, gold_version=before.gold_version) == before
    assert task.cache_key() != before.cache_key()


@pytest.mark.parametrize("version", NEW_MEASURES)
def test_a_versions_rules_are_the_previous_with_its_new_measures(version: int) -> None:
    previous, rules, new = GOLD_VERSIONS[version - 1], GOLD_VERSIONS[version], NEW_MEASURES[version]
    assert rules.measures == (*previous.measures, *new)
    assert set(rules.quantiles) - set(previous.quantiles) == NEW_QUANTILES[version]
    assert {name: q for name, q in rules.quantiles.items() if name not in new} == previous.quantiles
    assert {name: f for name, f in rules.span_floor.items() if name not in new} == previous.span_floor
    # Nothing else changes: the common words, the length factor and normalising stay the previous version's.
    kept = dataclasses.replace(rules, measures=previous.measures, quantiles=previous.quantiles,
                               span_floor=previous.span_floor)
    assert kept == previous


@pytest.mark.parametrize("version", NEW_MEASURES)
def test_a_versions_gold_is_the_previous_times_its_new_factors(golds: dict[int, TextGoldScorer],
                                                              version: int) -> None:
    # The previous version's factors and scores stay as they were: a version only multiplies them by its own.
    new = NEW_MEASURES[version]
    for response in EXTENDED_ON[version]:
        before, after = golds[version - 1].breakdown(response), golds[version].breakdown(response)
        assert {name: f for name, f in after.factors.items() if name not in new} == before.factors, response
        assert after.fluency == pytest.approx(before.fluency * math.prod(after.factors[n] for n in new)), response
