"""Built-in offline RLHF tasks: an SFT policy, a proxy reward model and a gold scorer, built locally.

``get_task(name)`` builds a task on first use (tens of seconds on CPU for the graph tasks, about five minutes for
the text task ``fortunes``; no downloads) and caches it on disk; see ``registry.py`` for the variants.

The registry loads lazily (it needs torch and transformers), so a task's torch-free parts, such as the text task's
corpus and gold scorer in ``ppo_core.tasks.fortunes``, import cheaply for the tuner and the dashboard.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ppo_core.tasks.builtin_task import BuiltinTask
    from ppo_core.tasks.registry import get_task
    from ppo_core.tasks.variants import TASK_NAMES

_LAZY = {
    "BuiltinTask": "ppo_core.tasks.builtin_task",
    "TASK_NAMES": "ppo_core.tasks.variants",
    "get_task": "ppo_core.tasks.registry",
}

__all__ = ["TASK_NAMES", "BuiltinTask", "get_task"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ppo_core.tasks' has no attribute {name!r}")
