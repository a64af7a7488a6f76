"""The worker processes of a long measurement: spawned, and killed by the kernel when the measurement's process
dies."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, TypeVar

from tuner.trial.lifetime import die_with_parent

T = TypeVar("T")


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


def each_result(function: Callable[..., T], jobs: Sequence[tuple[Any, ...]], workers: int,
                ordered: bool = True) -> Iterator[T]:
    """``function(*job)`` for each job: ``workers`` at a time in a :func:`worker_pool`, each result as it comes
    (``ordered`` False) or in the jobs' order; with one worker, one after another in this process, where a pool of
    one would only start a second interpreter to import torch, transformers and their like again."""
    if workers == 1:
        yield from (function(*job) for job in jobs)
        return
    with worker_pool(workers) as pool:
        futures = [pool.submit(function, *job) for job in jobs]
        yield from (future.result() for future in (futures if ordered else as_completed(futures)))
