"""Where a built-in task is cached, and whether it is built: torch-free, so that ``ppo-tune run`` can tell whether a
study's task needs building before it loads torch to build it."""

from __future__ import annotations

import os
from pathlib import Path

from ppo_core.models.cache_root import default_cache_dir
from ppo_core.tasks.variants import canonical_task, task_params

BUILD_INFO = "build_info.json"
"""Written last by a build: its presence marks a complete one."""


def task_dir(name: str, cache_dir: str | os.PathLike[str] | None = None, seed: int | None = None) -> Path:
    """Where the named task (of ``seed``) is or will be cached: its variant's name and its parameters' hash name it,
    so an alias shares its variant's build."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return root / "tasks" / f"{canonical_task(name)}-{task_params(name, seed).cache_key()}"


def is_built(name: str, cache_dir: str | None = None, seed: int | None = None) -> bool:
    """Whether the named task (of ``seed``) is built and cached: loading it would build nothing."""
    return (task_dir(name, cache_dir, seed) / BUILD_INFO).is_file()
