"""The text task's second gold (version 2): the surface measures against slow references, the battery's breadth, and
the first gold that the battery games. What every version keeps (the battery near zero, sentiment's order, real
text's fluency) is test_text_task_gold_versions.py's."""

from __future__ import annotations

import pytest
from helpers.gold_checks import GAMED_CEILING, gold_of

from ppo_core.tasks.fortunes.fluency import GOLD_VERSIONS, length_factor
from ppo_core.tasks.fortunes.gamed import GAMED
from ppo_core.tasks.fortunes.surface import (
    bare_run_share,
    doubled_word_share,
    is_plain_token,
    normalise,
    odd_token_share,
    one_word_sentence_share,
    sentences,
    shouted_share,
)
from ppo_core.tasks.fortunes.words import words

# --- the surface measures -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("token", [
    "It's", "well-known", "and/or", "e.g.", "U.S.", "(really)", '"Yes,"', "end.", "why?", "1,000", "$5", "10%", "4th",
    "1990s", "9:30", "'s", "n't", "-", "...", "a", "I", "J.", "NASA", "Hello!", "wait...", "(see", "it).",
    "12-foot-tall",
])
def test_plain_tokens(token: str) -> None:
    assert is_plain_token(token)


@pytest.mark.parametrize("token", [
    "#love", "@you", "😍", "<b>love</b>", "**great**", "http://a.com", "happy@joy.com", "print(\"I", "l0ve", "gr8",
    "sooooo", "LoVe", "haha", "xoxo", "g", "!!!", "great!!", "10/10", "<3", ":)", "любовь", "love_joy", "{joy}", "~",
])
def test_odd_tokens(token: str) -> None:
    assert not is_plain_token(token)


def test_typography_is_not_held_against_a_response() -> None:
    assert normalise("It\u2019s \u201cfine\u201d \u2014 really\u2026") == 'It\'s "fine" - really...'
    assert odd_token_share(normalise("It\u2019s \u201cfine\u201d \u2014 really\u2026")) == 0.0


@pytest.mark.parametrize(("text", "share"), [
    ("", 0.0), ("the cat sat", 0.0), ("#love and #joy", 2 / 3), ("a b c d", 3 / 4),
])
def test_odd_token_share(text: str, share: float) -> None:
    assert odd_token_share(text) == pytest.approx(share)


@pytest.mark.parametrize(("text", "share"), [
    ("", 0.0), ("I am here", 0.0), ("I AM SO happy", 2 / 4), ("NASA is OK", 2 / 3),
])
def test_shouted_share(text: str, share: float) -> None:
    assert shouted_share(text) == pytest.approx(share)


def slow_bare_runs(sentences: list[list[str]], common: frozenset[str], run: int, shrink: int) -> float:
    """Mark each word that lies in some window of ``run`` consecutive non-common words of one sentence, then count
    the marks."""
    marked = 0
    for tokens in sentences:
        hit: set[int] = set()
        for start in range(len(tokens) - run + 1):
            window = range(start, start + run)
            if all(tokens[i] not in common for i in window):
                hit.update(window)
        marked += len(hit)
    total = sum(map(len, sentences))
    return marked / (total + shrink) if total else 0.0


COMMON = frozenset({"the", "a", "of", "and", "is"})


@pytest.mark.parametrize("text", [
    "", "love", "love joy peace hope", "love joy peace", "the love joy peace hope of the world",
    "love joy and peace hope grace beauty", "a b c d e f g the h i j k", "the the the",
    "safety features.\nChecking results now", "love joy. peace hope grace beauty",
])
@pytest.mark.parametrize("run", [2, 3, 4])
@pytest.mark.parametrize("shrink", [0, 2])
def test_bare_run_share_matches_a_slow_reference(text: str, run: int, shrink: int) -> None:
    parts = [words(part) for part in sentences(text)]
    assert bare_run_share(parts, COMMON, run, shrink) == pytest.approx(slow_bare_runs(parts, COMMON, run, shrink))


@pytest.mark.parametrize(("text", "share"), [
    ("", 0.0), ("Best. Day. Ever.", 1.0), ("I know. Yes.", 1 / 3), ("It is a fine day, and I am glad.", 0.0),
    # A list in lines; a last part cut short (no ".", "!" or "?") is a response cut at its length, not a fragment.
    ("- love\n- joy\n- peace", 2 / 3), ("safety features.\nChecking", 0.0),
])
def test_one_word_sentence_share(text: str, share: float) -> None:
    assert one_word_sentence_share(text) == pytest.approx(share)


@pytest.mark.parametrize(("text", "share"), [
    ("", 0.0), ("so so so happy", 2 / 4), ("thank you thank you", 0.0), ("had had", 1 / 2),
])
def test_doubled_word_share(text: str, share: float) -> None:
    assert doubled_word_share(words(text)) == pytest.approx(share)


@pytest.mark.parametrize(("num_words", "factor"), [(0, 0.0), (1, 0.0), (2, 0.5 ** 1.5), (3, 1.0), (9, 1.0)])
def test_length_factor_with_a_floor_and_a_power(num_words: int, factor: float) -> None:
    assert length_factor(num_words, 3, floor=1, power=1.5) == pytest.approx(factor)


# --- gold on the battery and on real text -------------------------------------------------------------------------


def test_the_battery_is_broad() -> None:
    assert len(GAMED) >= 10
    assert sum(len(responses) for responses in GAMED.values()) >= 40
    assert all(len(responses) >= 3 for responses in GAMED.values())


def test_the_first_gold_is_gamed_by_the_battery() -> None:
    # What version 2 fixes: version 1 read the words alone, and so scored most of the battery as fluent.
    first = gold_of(1)
    responses = [response for kind in GAMED.values() for response in kind]
    gamed = sum(score > GAMED_CEILING for score in first(["When in doubt,"] * len(responses), responses))
    assert gamed >= len(responses) // 2


def test_every_version_names_measures_that_exist() -> None:
    from ppo_core.tasks.fortunes.fluency import FEATURES

    for rules in GOLD_VERSIONS.values():
        assert set(rules.measures) <= set(FEATURES)
        assert set(rules.quantiles) | set(rules.span_floor) <= set(rules.measures)
