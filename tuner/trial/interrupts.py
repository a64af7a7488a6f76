"""Ctrl-C and SIGTERM in a worker: raised at once while a trial runs, held while Optuna stores a trial's start or end.

Optuna stores a trial as RUNNING, then calls the objective, then stores how it ended. An interrupt raised between
those steps leaves the trial RUNNING with nothing to say why (a resume waits for its heartbeat, then calls it stale)
or, raised inside Optuna's record of the end, breaks that record. So while :func:`interrupts_held` is in force the
first interrupt is raised at once only inside :func:`interruptible` (where the objective catches it, fails the trial
as interrupted and queues it again); anywhere else it waits for the next of: the next :func:`interruptible`, the
:func:`raise_held` callback after a trial is stored, the end of :func:`interrupts_held`. Interrupts after the first
are ignored: a worker gets Ctrl-C twice (the terminal's, and the one ``ppo-tune run`` passes on; a scheduler's SIGTERM
to the whole job likewise), and the second must not cut short the recording of the first.

Only a signal whose handler raises (Python's Ctrl-C handler, ``ppo_core.errors.sigterm_as_interrupt``'s) is held: an
ignored one stays ignored, and one whose default ends the process still ends it.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType

import optuna
from optuna.trial import FrozenTrial

INTERRUPTS = (signal.SIGINT, signal.SIGTERM)

Handler = Callable[[int, FrameType | None], object]


@dataclass
class _Held:
    raising: dict[int, Handler]  # the handlers that were in force, which raise the interrupt's exception
    armed: bool = False
    seen: bool = False
    pending: int | None = None
    frame: FrameType | None = None

    def raise_pending(self) -> None:
        if self.pending is not None:
            signum, self.pending = self.pending, None
            self.raising[signum](signum, self.frame)


_held: _Held | None = None


def _on_interrupt(signum: int, frame: FrameType | None) -> None:
    held = _held
    if held is None or held.seen:
        return
    held.seen = True
    held.pending, held.frame = signum, frame
    if held.armed:
        held.raise_pending()


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Around ``study.optimize``: interrupts held outside :func:`interruptible`, the handlers as they were once it
    returns or raises, and an interrupt still held at the end raised then, so the worker never ends as if it had
    finished. Off the main thread (where no handler can be set) it changes nothing."""
    global _held
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {int(signum): signal.getsignal(signum) for signum in INTERRUPTS}
    raising: dict[int, Handler] = {int(signum): handler for signum, handler in previous.items() if callable(handler)}
    held, outer = _Held(raising), _held
    _held = held
    for signum in raising:
        signal.signal(signum, _on_interrupt)
    try:
        yield
    finally:
        _held = outer
        for signum in raising:
            signal.signal(signum, previous[signum])
    held.raise_pending()


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Where an interrupt is raised at once (a trial's run), and one held until now is raised on entry."""
    held = _held
    if held is None:
        yield
        return
    held.armed = True
    try:
        held.raise_pending()
        yield
    finally:
        held.armed = False


def raise_held(study: optuna.Study, trial: FrozenTrial) -> None:
    """An ``optimize`` callback, the last: the interrupt held while the trial's end was stored, raised now."""
    if _held is not None:
        _held.raise_pending()
