"""Where ppo-tune caches what it builds once and shares between runs and processes (built-in tasks, dequantised
GGUF policies): torch-free, so that a command that only names a model can find the cache without loading torch."""

from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    """``$PPO_TUNE_CACHE`` if set, else ``~/.cache/ppo-tune``."""
    env = os.environ.get("PPO_TUNE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "ppo-tune"
