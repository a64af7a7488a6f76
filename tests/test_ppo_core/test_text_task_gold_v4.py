"""The text task's fourth gold (version 4): its new measures by hand, and the batteries written before they were scored
(which the third gold let through). What every version keeps, and how each extends the one before, is
test_text_task_gold_versions.py's."""

from __future__ import annotations

import pytest
from helpers.gold_checks import (
    GAMED_CEILING,
    gold_of,
    highest_score,
)

from ppo_core.tasks.fortunes import TextGoldScorer, words
from ppo_core.tasks.fortunes.gamed import (
    BATTERY_PROMPTS,
    GAMED,
    VERSION_4_KINDS,
)
from ppo_core.tasks.fortunes.surface import (
    capitalised_share,
    folded_token_share,
    glueless,
    label_share,
    number_token_share,
    wrapped_token_share,
)

# --- the new measures, by hand ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "share"), [
    ("", 0.0), ("love and joy", 0.0), ("\U0001d4c1\U0001d45c\U0001d4cb\U0001d452 and joy", 1 / 3),
    ("\uff4c\uff4f\uff56\uff45 \uff41\uff4e\uff44", 1.0),
    # Typography is mapped before folding is judged, so a writer's curly quotes and ellipsis are not decoration.
    ("It\u2019s fine\u2026 isn\u2019t it?", 0.0),
])
def test_folded_token_share(text: str, share: float) -> None:
    assert folded_token_share(text) == pytest.approx(share)


@pytest.mark.parametrize(("text", "share"), [
    ("", 0.0), ("he said 'no' twice", 0.25), ("'amazing' and 'lovely'", 2 / 3), ("(happy) (great).", 1.0),
    ('"Yes," she said', 1 / 3), ("(see it) now", 0.0), ("a (b) c", 0.0),
])
def test_wrapped_token_share(text: str, share: float) -> None:
    # One character in brackets ("(b)") labels an item of a list; a quoted reply ("Yes,") counts, and the ramp,
    # calibrated on real text, spares the one a sentence holds.
    assert wrapped_token_share(text) == pytest.approx(share)


@pytest.mark.parametrize(("text", "share"), [
    ("", 0.0), ("1 2 3 happy", 0.75), ("at 9:30, 10% off", 0.5), ("in 1990s style", 0.0), ("$5 and #1", 2 / 3),
])
def test_number_token_share(text: str, share: float) -> None:
    assert number_token_share(text) == pytest.approx(share)


@pytest.mark.parametrize(("text", "share"), [
    ("", 0.0), ("User: I love it! Assistant: Great!", 2 / 6), ("Note: it works", 1 / 3), ("at 9: it", 0.0),
    ("a note: it works", 0.0),
])
def test_label_share(text: str, share: float) -> None:
    assert label_share(text) == pytest.approx(share)


@pytest.mark.parametrize(("text", "value"), [
    ("", 0.0), ("love", 0.0), ("love joy peace", 1.0), ("love and joy", 0.0), ("the", 0.0),
])
def test_glueless(text: str, value: float) -> None:
    assert glueless(words(text), frozenset({"and", "the", "of"})) == value


@pytest.mark.parametrize(("text", "share"), [
    ("", 0.0), ("Love And Joy", 2 / 3), ("The man met Mary in Paris.", 2 / 6), ("Yes. No. Maybe.", 0.0),
    ("NASA SAYS NO", 0.0),
])
def test_capitalised_share(text: str, share: float) -> None:
    # A sentence's first word is capitalised by rule, and all capitals are shouting's to judge.
    assert capitalised_share(text) == pytest.approx(share)


# --- gold on the batteries and on real text -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def golds() -> dict[int, TextGoldScorer]:
    return {version: gold_of(version) for version in (3, 4)}


def test_the_third_gold_is_fooled_by_the_unseen_batteries(golds: dict[int, TextGoldScorer]) -> None:
    # The defect version 4 fixes: NFKC folds styled letters into plain words, which version 3 read as fluent.
    styled = GAMED["styled unicode letters"][0]  # "love and joy forever" in script capitals' lower case
    assert golds[3]([BATTERY_PROMPTS[0]], [styled])[0] > 0.8
    assert golds[4]([BATTERY_PROMPTS[0]], [styled])[0] <= GAMED_CEILING
    fooled = [r for kind in VERSION_4_KINDS for r in GAMED[kind] if highest_score(golds[3], r) > 0.2]
    assert len(fooled) >= 8
