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


def test_the_type_checkers_imports_are_the_public_names_from_their_modules() -> None:
    # The names live in one list (_PUBLIC, which __all__ sorts); the imports a type checker reads must say the same.
    import ast
    from pathlib import Path

    tree = ast.parse(Path(tuner.__file__).read_text())
    guarded = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    imported = {alias.name: node.module for node in guarded.body if isinstance(node, ast.ImportFrom)
                for alias in node.names}
    assert imported == tuner._PUBLIC
