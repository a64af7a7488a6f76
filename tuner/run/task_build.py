"""A study's built-in task, built before its first trial: in the run's own process, with each stage and the time
left said as it goes, so that the build is neither silent nor counted as trials' time.

A task is built once, on first use (``ppo_core.tasks.registry``). Left to the trials, the first of them built it: for
15-25 minutes on 2 cores for a SmolLM2 task, `ppo-tune run` showed only its progress bar at 0, printed nothing when
its output went to a file, and the build's minutes were stored as those trials' durations (and counted in what
early stopping saved). Built here, a trial loads it from the cache.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from rich.console import Console

TASK_LOGGERS = ("ppo_core.tasks",)
"""Where a build says what it is doing: its stages, and the time a long stage has left."""


@contextmanager
def build_progress() -> Iterator[None]:
    """The task build's log lines on stderr while it runs, one a line, terminal or file alike."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    loggers = [logging.getLogger(name) for name in TASK_LOGGERS]
    levels = [log.level for log in loggers]
    for log in loggers:
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    try:
        yield
    finally:
        for log, level in zip(loggers, levels, strict=True):
            log.removeHandler(handler)
            log.setLevel(level)


def build_task_first(base: Mapping[str, Any], searched: Mapping[str, Any], console: Console) -> float | None:
    """Build the study's built-in task if it is not cached yet; the seconds it took, or None when there was nothing
    to build (no built-in task, a task the search chooses, or one already built)."""
    name = base.get("task")
    if not name or "task" in searched or "task_seed" in searched:
        return None
    from ppo_core.tasks.cache_dirs import is_built

    cache_dir, seed = base.get("task_cache_dir"), base.get("task_seed")
    if is_built(name, cache_dir, seed):
        return None
    console.print(f"building task {name!r} before the first trial (once; it is cached for every later run): its "
                  "stages and the time left follow", soft_wrap=True, markup=False)
    started = time.monotonic()
    from ppo_core.tasks.registry import get_task  # torch and the builders: only when there is a build

    with build_progress():
        get_task(name, cache_dir, seed)
    seconds = time.monotonic() - started
    console.print(f"built task {name!r} in {seconds:.0f} s", soft_wrap=True, markup=False)
    return seconds
