"""ppo_core.config.value_types: the one set of type rules behind config files and study files, for typing annotations
and for annotations written as text (Optuna's signatures)."""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any, Literal

import pytest

from ppo_core.config.value_types import describe_type, fits, read_annotation, type_parts

FITS = [
    (1, int), (1, float), (1.5, float), (True, bool), (False, bool | None), (None, int | None), (None, "int | None"),
    (3, "int | None"), ("x", str), ("x", "str | int"), (4, "str | int"), ("k1", Literal["k1", "k2"]),
    ("eos", Literal["eos"] | None), (None, Literal["eos"] | None), (["a", "b"], list[str]), ([1, 2.5], list[float]),
    ([], list[int]), ({"a": 1}, "dict[str, Any] | None"), ({"a": [1]}, "Mapping[str, Sequence[GridValueType]]"),
    ([1], "Sequence[float]"), (2.0, "float"), (math.inf, float), (math.nan, "float"), ("any string", "Literal['a']"),
    (object(), Any),
]
MISFITS = [
    (True, int), (False, float), (True, "int | None"), (True, "float"), (1, bool), (0, "bool | None"),
    (1.5, int), (2.0, "int"), ("1", int), ("1.5", float), (None, int), (None, "float"), ("k4", Literal["k1", "k2"]),
    (None, Literal["eos"]), ("eos", list[str]), (["a", 1], list[str]), ([True], list[float]), ([1], "dict"),
    ({}, list), (1, "Callable[[int], int] | None"), (lambda: 1, "Callable[[int], int]"), ("x", "BaseSampler | None"),
    (1, "NoneType"),
]


@pytest.mark.parametrize(("value", "annotation"), FITS)
def test_values_that_fit(value: Any, annotation: Any) -> None:
    assert fits(value, annotation)


@pytest.mark.parametrize(("value", "annotation"), MISFITS)
def test_values_that_do_not_fit(value: Any, annotation: Any) -> None:
    assert not fits(value, annotation)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, [1.0, math.nan]])
def test_finite_refuses_an_inf_or_a_nan_where_a_float_is_wanted(value: Any) -> None:
    annotation = list[float] if isinstance(value, list) else "float | None"
    assert fits(value, annotation) and not fits(value, annotation, finite=True)


def test_finite_takes_a_whole_number_past_a_floats_range() -> None:
    # Only floats are asked whether they are finite: 2**1100 as a float would overflow.
    assert fits(2**1100, float, finite=True)


@pytest.mark.parametrize(("text", "annotation"), [
    ("int | None", int | None), ("float", float), ("str | int", str | int), ("dict[str, Any] | None", dict | None),
    ("Mapping[str, Sequence[GridValueType]]", dict), ("list[FrozenTrial] | None", list | None),
    ("Literal['sobol', 'halton']", str),
])
def test_text_reads_as_the_typing_object_of_its_heads(text: str, annotation: Any) -> None:
    assert read_annotation(text) == annotation


def test_text_heads_no_file_gives_keep_their_name_and_fit_nothing() -> None:
    # The brackets inside a part do not split it: one Callable and a None.
    callable_, none = type_parts("Callable[[Study, Sequence[float] | None], None] | None")
    assert callable_.__name__ == "Callable" and none is type(None)
    values: list[Any] = [None, 1, 1.5, "f", True, [], {}]
    assert not any(fits(value, callable_) for value in values)


@pytest.mark.parametrize(("annotation", "words"), [
    (int, "int"), (float | None, "float or null"), (list[str] | None, "list of str or null"),
    (Literal["k1", "k2"], "one of 'k1', 'k2'"), (Literal["eos"] | None, "one of 'eos' or null"),
    ("int | None", "int or null"),
])
def test_described_by_python_names(annotation: Any, words: str) -> None:
    assert describe_type(annotation) == words


@pytest.mark.parametrize(("annotation", "finite", "words"), [
    (int | None, False, "a whole number or null"), (float, False, "a number"), (float, True, "a finite number"),
    (list[float] | None, False, "a list or null"), ("bool | None", False, "true or false or null"),
    ("dict[str, Any] | Mapping[str, int]", False, "a mapping"), ("str | int", True, "a string or a whole number"),
    ("Callable[[int], int] | None", False, "a Callable (not settable in a study file) or null"),
])
def test_described_in_plain_words(annotation: Any, finite: bool, words: str) -> None:
    assert describe_type(annotation, plain=True, finite=finite) == words


def test_the_checker_loads_without_torch_or_optuna() -> None:
    # The study parser and the dashboard import the config's checks; torch would cost them seconds.
    code = ("import sys, ppo_core.config.checks, ppo_core.config.rules, ppo_core.config.value_types; "
            "assert not {'torch', 'optuna'} & set(sys.modules), sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)
