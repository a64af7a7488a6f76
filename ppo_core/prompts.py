"""Prompt sources: a built-in task's prompts, or a file of one prompt per line (or JSONL with 'prompt')."""

from __future__ import annotations

import json
from pathlib import Path

from ppo_core.config import ConfigError


def read_prompts(path: str) -> list[str]:
    """Prompts from a .txt file (one per line, blank lines skipped) or a .jsonl file with a 'prompt' key."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"prompts_path: no such file {path!r}")
    lines = [line for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
    if file.suffix == ".jsonl":
        try:
            prompts = [str(json.loads(line)["prompt"]) for line in lines]
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise ConfigError(f"prompts_path: each line of {path!r} must be a JSON object with 'prompt' ({error})") \
                from None
    else:
        prompts = lines
    if not prompts:
        raise ConfigError(f"prompts_path: {path!r} holds no prompts")
    return prompts
