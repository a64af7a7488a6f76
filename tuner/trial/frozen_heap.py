"""A command's process spends its last second walking objects it will never free: freeze them instead.

A process that imported torch, transformers and the trainer holds millions of objects that live as long as it does
(modules, functions, classes). Python's cyclic garbage collector walks all of them at every full collection, and
again at exit, where it took about 1 s of CPU on 2 cores for a trial process; that second is paid by every trial,
every worker's fork server and every ``ppo-tune`` command. :func:`gc.freeze` moves the objects alive at the moment
out of the collector's reach. Nothing is lost by it: objects still go when their last reference does, and those
frozen at exit would only have been freed by the exit itself.

Only a process's own entry point may freeze: a function that freezes when called in-process (a test calling
``ppo_tune.cli.main``) would keep every cycle its caller had made until then alive for good.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def freeze_now() -> None:
    """Everything alive now is out of the cyclic collector's reach (:func:`gc.freeze`)."""
    gc.freeze()


def run_as_process(main: Callable[[], T]) -> T:
    """``main()`` as the whole of this process's work: what the module imports is frozen first (every collection
    during the run skips it), and everything still alive is frozen when ``main`` returns or raises, so that the
    interpreter's exit does not walk it."""
    freeze_now()
    try:
        return main()
    finally:
        freeze_now()
