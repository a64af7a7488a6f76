"""tuner's public names (its ``__all__``, loaded on first use) resolve, and the names renamed stay importable for one
release as the objects that replaced them."""

from __future__ import annotations

import importlib
import pkgutil

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


MODULE_FACES = ("production", "run", "search", "store", "study", "trial")
"""The wings whose face lists their modules (the others' faces name the functions they offer)."""


@pytest.mark.parametrize("wing", MODULE_FACES)
def test_a_wing_s_face_lists_each_of_its_modules(wing: str) -> None:
    # A module renamed or added must be named in its wing's __init__ too.
    package = importlib.import_module(f"tuner.{wing}")
    modules = {info.name for info in pkgutil.iter_modules(package.__path__) if not info.name.startswith("_")}
    listed = set(package.__all__)
    assert listed == modules, (sorted(listed - modules), sorted(modules - listed))
