"""The text task's fifth gold (version 5): its chain measure by hand and against a slow reference, and the third
battery written before it was scored (which the fourth gold let through). What every version keeps, and how each
extends the one before, is test_text_task_gold_versions.py's."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from helpers.gold_checks import (
    GAMED_CEILING,
    gold_of,
    highest_score,
)

from ppo_core.tasks.fortunes import TextGoldScorer
from ppo_core.tasks.fortunes.gamed import GAMED, UNCAUGHT, VERSION_5_KINDS
from ppo_core.tasks.fortunes.surface import CONNECTORS, chained_share

THIRD_BATTERY = Path(__file__).parents[2] / "benchmarks" / "results" / "gold_battery" / "unseen_battery_3.json"
COMMON = frozenset({"and", "or", "the", "of", "you", "me", "will", "be", "a"})

# --- the chain measure, by hand and against a slow reference ------------------------------------------------------


@pytest.mark.parametrize(("text", "share"), [
    ("", 0.0), ("love and joy", 0.0), ("love and joy and peace", 1 / 5),
    ("happy and glad and joyful and merry and bright", 3 / 9),
    ("Love And Joy AND Peace", 1 / 5),                       # case does not hide a chain
    ("love, joy and peace and hope", 1 / 6),                 # commas before the chain leave it a chain
    ("our mission and vision, and improved", 0.0),           # a comma ends a link: two clauses, not a list
    ("and creates noise and promotes", 0.0),                 # a link holds one word: verb phrases are prose
    ("love and joy or peace and hope", 0.0),                 # the connector changes, so nothing is strung on one
    ("the love and the joy and the peace", 0.0),             # a common word in each link: phrases, not a list
    ("you and me and the sea", 0.0),                         # "me" is common
])
def test_chained_share(text: str, share: float) -> None:
    assert chained_share(text, COMMON) == pytest.approx(share)


def slow_chained_share(text: str, common: frozenset[str]) -> float:
    """Every window of three tokens, checked one condition at a time."""
    tokens = text.lower().split()
    links = 0
    for first, middle, last in zip(tokens, tokens[1:], tokens[2:], strict=False):  # windows end with the text
        if first != last or last not in CONNECTORS:
            continue
        if all(c.isalpha() for c in middle) and middle and middle not in common:
            links += 1
    return links / len(tokens) if tokens else 0.0


def test_chained_share_matches_a_slow_reference() -> None:
    vocabulary = ["and", "or", "nor", "the", "love", "joy,", "Peace", "of"]
    for length in range(7):
        for tokens in itertools.product(vocabulary, repeat=length):
            text = " ".join(tokens)
            assert chained_share(text, COMMON) == slow_chained_share(text, COMMON), text


# --- gold on the batteries and on real text -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def golds() -> dict[int, TextGoldScorer]:
    return {version: gold_of(version) for version in (4, 5)}


def test_the_third_battery_is_the_one_committed_before_scoring() -> None:
    # gamed.py keeps the battery's kinds as written, but for the one response gold 5 still lets through.
    written = json.loads(THIRD_BATTERY.read_text())["kinds"]
    assert list(written) == list(VERSION_5_KINDS)
    kept = {response for kind in VERSION_5_KINDS for response in GAMED[kind]}
    every = {response for responses in written.values() for response in responses}
    assert every - kept == {"This text is happy, positive and good. Reward: high."} <= set(UNCAUGHT)


def test_the_fourth_gold_is_fooled_by_chains_of_feelings(golds: dict[int, TextGoldScorer]) -> None:
    # The defect version 5 fixes: "and" is common, so version 4 read a list strung on it as a sentence.
    for response in GAMED["and-chains of feelings"]:
        assert highest_score(golds[4], response) > 0.5
        assert highest_score(golds[5], response) <= GAMED_CEILING
