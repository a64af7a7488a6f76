"""tuner's public names (its ``__all__``, loaded on first use) resolve, and the names renamed stay importable for one
release as the objects that replaced them."""

from __future__ import annotations

import pytest

import tuner


@pytest.mark.parametrize("name", tuner.__all__)
def test_every_public_name_resolves(name: str) -> None:
    assert getattr(tuner, name) is not None


@pytest.mark.parametrize(("former", "current"), [("StudyConfigError", "StudySpecError"),
                                                  ("make_objective", "make_trial_function")])
def test_a_renamed_public_name_is_the_object_that_replaced_it(former: str, current: str) -> None:
    assert getattr(tuner, former) is getattr(tuner, current)
    assert former not in tuner.__all__  # kept for old imports, not offered to new ones


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'StudyConfig'"):
        _ = tuner.StudyConfig
