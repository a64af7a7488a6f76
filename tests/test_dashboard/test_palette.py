"""The dashboard's colours (dashboard.palette): trial colours apart from each other and from every reference line, as
a person sees them, and the CIELAB conversion they are measured in against published values."""

from __future__ import annotations

import itertools

import pytest

from dashboard.charts import GROUP_PALETTE, group_colors
from dashboard.palette import (
    MIN_CHROMA,
    MIN_REFERENCE_DISTANCE,
    MIN_TRIAL_DISTANCE,
    REFERENCE_COLORS,
    STATE_COLORS,
    THRESHOLD_COLOR,
    chroma,
    distance,
    lab,
    trial_color,
    trial_palette,
)


@pytest.mark.parametrize(("color", "expected"), [
    ("#ffffff", (100.0, 0.0, 0.0)), ("#000000", (0.0, 0.0, 0.0)),
    ("#ff0000", (53.24, 80.09, 67.20)), ("#00ff00", (87.73, -86.18, 83.18)), ("#0000ff", (32.30, 79.19, -107.86)),
    ("#808080", (53.59, 0.0, 0.0)),
])
def test_cielab_of_reference_colours(color: str, expected: tuple[float, float, float]) -> None:
    # Published sRGB (D65) -> CIELAB values, to 0.1.
    assert lab(color) == pytest.approx(expected, abs=0.1)


def test_trial_colours_are_apart_from_each_other_and_every_reference_line() -> None:
    palette = trial_palette()
    assert len(palette) >= 24  # enough for a study's selection and best trial without repeats
    for first, second in itertools.combinations(palette, 2):
        assert distance(first, second) >= MIN_TRIAL_DISTANCE, (first, second)
    for color in palette:
        assert chroma(color) >= MIN_CHROMA, color  # no grey: the best trial is never drawn #7F7F7F
        assert all(distance(color, ref) >= MIN_REFERENCE_DISTANCE for ref in REFERENCE_COLORS), color
    # The trials of the report wear neither the threshold's red nor twin colours.
    assert all(distance(trial_color(n), THRESHOLD_COLOR) >= MIN_REFERENCE_DISTANCE for n in range(200))
    for trial, twin in ((5, 18), (2, 19), (4, 10), (3, 13)):
        assert distance(trial_color(trial), trial_color(twin)) >= MIN_TRIAL_DISTANCE


def test_group_colours_keep_clear_of_the_reference_lines_and_states_have_one_colour() -> None:
    assert all(distance(c, ref) >= MIN_REFERENCE_DISTANCE for c in GROUP_PALETTE for ref in REFERENCE_COLORS)
    assert group_colors(["rloo", "gae", "grpo"]) == group_colors(["grpo", "gae", "rloo"])
    assert len(set(STATE_COLORS.values())) == len(STATE_COLORS)

