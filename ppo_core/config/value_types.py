"""Whether a value read from a file fits a type annotation, and the annotation in words for the message that says it
does not: the one set of type rules behind config files (PPOConfig's fields) and study files (the search space's
choices, the scalars of each section, the sampler's and pruner's options against Optuna's signatures).

The rules: true and false are booleans, never numbers; a whole number is taken where a float is; null fits an
optional (``X | None``); a ``Literal`` takes its own values; ``list[T]`` takes a list of T's. An annotation written as
text (a signature under postponed evaluation, as Optuna's are) is read into the same typing objects first.
"""

from __future__ import annotations

import functools
import math
import operator
import types
import typing
from typing import Any, Literal

# The types a YAML file gives, in the words a study file's messages use for them.
_WORDS: dict[Any, str] = {bool: "true or false", int: "a whole number", float: "a number", str: "a string",
                          type(None): "null", dict: "a mapping", list: "a list"}
FILE_TYPES = tuple(_WORDS)
"""The types a value read from a YAML file can have (its numbers, strings, booleans, null, lists and mappings)."""

# The head of a part of an annotation written as text, where it names one of those types. A signature's Sequence or
# Mapping takes the list or mapping a file gives; a Literal reads as a string (its values are not read from the text).
_TEXT_HEADS: dict[str, Any] = {"bool": bool, "int": int, "float": float, "str": str, "None": type(None), "dict": dict,
                               "Mapping": dict, "list": list, "Sequence": list, "Literal": str}


@functools.cache
def _named_type(name: str) -> type:
    """A type called ``name`` that no value fits: the part of a text annotation that names no file type (a
    ``Callable``, a ``BaseSampler``), kept for its name. One per name, so a union of two of them is one part."""
    return type(name, (), {})


@functools.cache
def read_annotation(text: str) -> Any:
    """An annotation written as text, as a typing object: each part of its top-level union by its head
    (``'dict[str, Any] | None'`` -> ``dict | None``, ``'Callable[[int], int]'`` -> a type named Callable)."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += (char == "[") - (char == "]")
        if char == "|" and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    heads = [part.strip().split("[", 1)[0] for part in [*parts, current]]
    return functools.reduce(operator.or_, [_TEXT_HEADS.get(head) or _named_type(head) for head in heads])


def type_parts(annotation: Any) -> tuple[Any, ...]:
    """The members of a union (``int | None`` -> int and NoneType), or the annotation alone."""
    if isinstance(annotation, str):
        annotation = read_annotation(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def fits(value: Any, annotation: Any, *, finite: bool = False) -> bool:
    """Whether ``value``, as a YAML file or ``--set`` gives it, is of ``annotation``'s type (a typing object, or its
    text). A type no file value can have (a callable, a class) fits nothing; ``Any`` fits everything. With ``finite``,
    an inf or a nan does not fit a float: for callers that name no such value in a message of their own.

    Example::

        fits(3, "float | None")  # True: a whole number is taken where a float is
        fits(True, int)  # False: a boolean is no number
        fits("k4", Literal["k1", "k2", "k3"])  # False
    """
    parts = type_parts(annotation)
    if len(parts) > 1:
        return any(fits(value, part, finite=finite) for part in parts)
    (annotation,) = parts
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return value in typing.get_args(annotation)
    if origin is list:
        (item,) = typing.get_args(annotation)
        return isinstance(value, list) and all(fits(v, item, finite=finite) for v in value)
    if annotation is Any:
        return True
    if annotation is bool or isinstance(value, bool):
        # Python's bool is an int; a file's true and false are not numbers.
        return annotation is bool and isinstance(value, bool)
    if annotation is float:
        non_finite = isinstance(value, float) and not math.isfinite(value)
        return isinstance(value, (int, float)) and not (finite and non_finite)
    return annotation in _WORDS and isinstance(value, annotation)


def describe_type(annotation: Any, *, plain: bool = False, finite: bool = False) -> str:
    """``annotation`` (a typing object, or its text) in words for a message. By Python's names, as config errors and
    the config reference write them: ``int or null``, ``list of str``, ``one of 'k1', 'k2'``. ``plain``: in the words
    of a study file's messages, ``a whole number or null``, ``a list``, a type no file value fits named as such (with
    ``finite``, a float is ``a finite number``).

    Example::

        describe_type(int | None)  # 'int or null'
        describe_type("Callable[[int], int] | None", plain=True)  # 'a Callable (not settable in a study file) or null'
    """
    parts = type_parts(annotation)
    if len(parts) > 1:
        words = [describe_type(part, plain=plain, finite=finite) for part in parts]
        return " or ".join(dict.fromkeys(words))
    (annotation,) = parts
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return "one of " + ", ".join(repr(arg) for arg in typing.get_args(annotation))
    if annotation is type(None):
        return "null"
    if plain:
        kind = origin or annotation
        if kind is float and finite:
            return "a finite number"
        name = getattr(kind, "__name__", str(kind))
        return _WORDS.get(kind, f"a {name} (not settable in a study file)")
    if origin is list:
        return f"list of {describe_type(typing.get_args(annotation)[0])}"
    return getattr(annotation, "__name__", str(annotation))
