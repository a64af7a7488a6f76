"""Whether a model path can be loaded at all, checked before anything is made: torch-free, so that a command that
only names a model (``ppo-tune best --policy-model``) checks it as a run does without loading torch."""

from __future__ import annotations

from pathlib import Path

from ppo_core.config_checks import ConfigError


def require_model(path: str, field_name: str) -> None:
    """Refuse a path that can only name a local directory (absolute, relative with ``.`` or ``~``, or deeper than a
    hub's ``owner/name``) when nothing is there: transformers would call it a malformed hub repo id instead."""
    local = path.startswith(("/", ".", "~")) or path.count("/") > 1 or "\\" in path
    if local and not Path(path).exists():
        raise ConfigError(f"{field_name}: no model at {path!r}")
