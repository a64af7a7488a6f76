"""The built-in tasks the tests train on, in the suite's own task cache (``$PPO_TUNE_CACHE``, where ``.ci/run`` puts
it): each is built once there for the whole suite, by the first process that needs it (the others wait on its lock),
rather than again in a temporary cache per test module. The tests of the build itself (tests/test_ppo_core/
test_tasks.py, test_text_task_build.py) build their own copy: what a build does in its process is what they check."""

from __future__ import annotations

from pathlib import Path

from ppo_core.models.cache_root import default_cache_dir
from ppo_core.tasks import get_task


def task_cache(name: str) -> Path:
    """The suite's task cache, holding the built-in task ``name`` built (here first, if no process has yet)."""
    get_task(name)
    return default_cache_dir()
