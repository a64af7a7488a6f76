"""The worker processes of a long measurement: spawned, and killed by the kernel when the measurement's process
dies."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

from tuner.trial.lifetime import die_with_parent


def worker_pool(workers: int) -> ProcessPoolExecutor:
    """``workers`` spawned processes (each a fresh interpreter: nothing forked from the caller's threads or its
    torch), each of which dies with the measurement's process.

    A measurement stopped by SIGTERM or SIGKILL used to leave its workers running their jobs to the end, minutes of
    CPU whose results nobody would write, beside the resumed measurement (the real-model study's re-measure, stopped
    with ``kill``, left two). Ctrl-C reaches the whole process group; these signals reach the measurement alone.
    """
    # The caller's pid, not the worker's parent when it asks: it asks once its interpreter has started, and a
    # measurement killed in the meantime would otherwise leave it running.
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=die_with_parent,
                               initargs=(os.getpid(),))
