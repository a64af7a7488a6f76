"""The errors every part raises for what the command line reports in one line: bad input from a user (exit 2), a
divergence and a failure at run time (exit 1), and SIGTERM taken as Ctrl-C is (exit 143)."""

from __future__ import annotations

import signal
from types import FrameType


class InputError(ValueError):
    """Something the user gave is wrong; the message is one line that names it (a field, a key or a flag)."""


class NonFiniteError(RuntimeError):
    """A loss, KL or score became NaN or infinite; the message names the metric and the update."""


class RunFailure(RuntimeError):
    """The run could not go on for a reason outside its input: the disk filled up while it wrote its model."""


def add_context(error: BaseException, text: str) -> None:
    """Say more about ``error`` where it is reported (where a failed run's metrics went); :func:`first_line` appends
    it. These are Python 3.11's exception notes, which a printed traceback shows too."""
    setattr(error, "__notes__", [*getattr(error, "__notes__", []), text])  # noqa: B010  # no add_note on 3.10


def context_of(error: BaseException) -> list[str]:
    """What :func:`add_context` added to ``error``, in order."""
    return [str(note) for note in getattr(error, "__notes__", [])]


def first_line(error: BaseException) -> str:
    """The first line of an error's message (its type's name when it has none) and its context, for one-line
    reports."""
    text = str(error).strip()
    return "; ".join([text.splitlines()[0] if text else type(error).__name__, *context_of(error)])


class Terminated(KeyboardInterrupt):
    """SIGTERM (a batch scheduler's, ``timeout``'s, ``kill``'s), raised where the process is, so that it unwinds as
    Ctrl-C does: every ``except KeyboardInterrupt`` that stops children and re-queues work runs for it too."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated("terminated (SIGTERM)")


def sigterm_as_interrupt() -> None:
    """Make SIGTERM raise :class:`Terminated` in this process's main thread, from now on."""
    signal.signal(signal.SIGTERM, _raise_terminated)
