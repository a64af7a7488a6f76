"""Built-in offline RLHF tasks: an SFT policy, a proxy reward model and a gold scorer, built locally.

``get_task(name)`` builds a task on first use (tens of seconds on CPU, no downloads) and
caches it on disk; see ``registry.py`` for the variants.
"""

from __future__ import annotations

from ppo_core.tasks.base import BuiltinTask
from ppo_core.tasks.registry import TASK_NAMES, get_task

__all__ = ["TASK_NAMES", "BuiltinTask", "get_task"]
