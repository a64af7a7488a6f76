"""Reading one value of the study file: the readers that check a value's type under the key it sits at, and
:class:`StudySpecError`, the one-line error naming that key, which every part of the study file's parser raises.
"""

from __future__ import annotations

import math
from typing import Any

from ppo_core.config.value_types import fits
from ppo_core.errors import InputError
from tuner.store.messages import one_line


class StudySpecError(InputError):
    """The study file is wrong; one line that names the key."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


def fail(message: str) -> StudySpecError:
    return StudySpecError(message)


def show_value(value: Any) -> str:
    """A value as YAML writes it: true, false, null."""
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def as_mapping(value: Any, key: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not fits(value, dict):
        raise fail(f"{key}: expected a mapping, got {value!r}")
    return value


def check_keys(data: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
    for key in data:
        if key not in allowed:
            # Quoted when it would not read as itself: empty, padded with spaces, unprintable or not a string.
            shown = key if isinstance(key, str) and key and key.isprintable() and key.strip() == key else repr(key)
            raise fail(f"{where}{shown}: unknown key (expected one of {', '.join(allowed)})")


def as_boolean(value: Any, key: str) -> bool:
    """YAML's true or false; a string such as 'maybe' or 'no' would otherwise be read as true."""
    if not fits(value, bool):
        raise fail(f"{key}: expected true or false, got {value!r}")
    return value


def as_whole(value: Any, key: str) -> int:
    if not fits(value, int):
        raise fail(f"{key}: expected a whole number, got {value!r}")
    return value


def as_number(value: Any, key: str) -> float:
    if not fits(value, float | str):  # a string such as '1e-4', read below
        raise fail(f"{key}: expected a number, got {value!r}")
    try:
        return float(value)
    except ValueError:
        raise fail(f"{key}: expected a number, got {value!r}") from None


def as_finite(value: Any, key: str) -> float:
    number = as_number(value, key)
    if not math.isfinite(number):
        raise fail(f"{key}: must be a finite number, got {number}")
    return number


def as_seconds(value: Any, key: str) -> float:
    if not fits(value, float):
        raise fail(f"{key}: expected a number of seconds, got {value!r}")
    if not value > 0 or not math.isfinite(value):
        raise fail(f"{key}: must be > 0 seconds, got {value:g}")
    return float(value)
