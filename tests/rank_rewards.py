"""A reward function that records, per process, which dataset rows it scored and what it gave them: how the
data-parallel tests see each rank's share of a batch from outside the trainer."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

LOG_DIR_ENV = "PPO_TUNE_TEST_REWARD_LOG"


def logged_letter_a(prompts: list[Any], completions: list[Any], row: list[int], **kwargs: Any) -> list[float]:
    """The share of the completion's words containing 'a', logged with the rows it was given."""
    scores = [_share_with_a(completion) for completion in completions]
    log = Path(os.environ[LOG_DIR_ENV]) / f"rank{os.environ.get('RANK', '0')}.jsonl"
    with log.open("a") as handle:
        handle.write(json.dumps({"rows": list(row), "scores": scores}) + "\n")
    return scores


def _share_with_a(completion: Any) -> float:
    words = (completion if isinstance(completion, str) else completion[0]["content"]).lower().split()
    return sum("a" in word for word in words) / len(words) if words else 0.0
