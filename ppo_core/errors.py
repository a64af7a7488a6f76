"""The error every part raises for bad input from a user: the command line prints it as one line and exits 2."""

from __future__ import annotations


class InputError(ValueError):
    """Something the user gave is wrong; the message is one line that names it (a field, a key or a flag)."""


class NonFiniteError(RuntimeError):
    """A loss, KL or score became NaN or infinite; the message names the metric and the update."""


def first_line(error: BaseException) -> str:
    """The first line of an error's message (its type's name when it has none), for one-line reports."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
