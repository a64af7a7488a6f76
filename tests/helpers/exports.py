"""Reading an export's text (``ppo-tune best --format``, ``tuner.exports``) back: its setting lines as shell words,
its comments, its ``--key value`` flags and its ``key=value`` overrides."""

from __future__ import annotations

import shlex
from typing import Any


def settings_of(text: str) -> list[str]:
    """The shell words of an export's setting lines (comments left out)."""
    lines = [line.rstrip(" \\") for line in text.splitlines() if line and not line.startswith("#")]
    return shlex.split(" ".join(lines))


def comments_of(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#")]


def flags_of(text: str) -> dict[str, Any]:
    """``--key value...`` words as key -> value (a list for several values, True for a switch alone)."""
    flags: dict[str, Any] = {}
    key = None
    for word in settings_of(text):
        if word.startswith("--"):
            key = word[2:]
            flags[key] = True
        else:
            assert key is not None, word
            flags[key] = word if flags[key] is True else [*([flags[key]] if isinstance(flags[key], str) else
                                                            flags[key]), word]
    return flags


def overrides_of(text: str) -> dict[str, str]:
    return dict(word.split("=", 1) for word in settings_of(text))
