"""What ``accelerate launch`` and ``torchrun`` tell every process they start (WORLD_SIZE, RANK), read without torch:
the config derives its batch sizes from the world size when it is built, before any process group exists."""

from __future__ import annotations

import os

from ppo_core.config.checks import ConfigError


def _launch_variable(name: str, default: int, meaning: str) -> int:
    """An integer that ``accelerate launch`` and ``torchrun`` set in every process they start."""
    try:
        return int(os.environ.get(name, str(default)))
    except ValueError:
        raise ConfigError(f"{name}: expected {meaning}, got {os.environ[name]!r}") from None


def launched_world_size() -> int:
    """Processes in this launch (WORLD_SIZE). Reading it when the config is built lets the batch hierarchy be
    derived once, before the trainer exists."""
    return max(1, _launch_variable("WORLD_SIZE", 1, "a number of processes"))


def launched_rank() -> int:
    """This process's rank in its launch (RANK; 0 when not launched), read before any process group exists."""
    return _launch_variable("RANK", 0, "a process rank")
