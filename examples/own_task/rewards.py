"""The training reward of the own-task example: how positive a completion sounds, and nothing else.

VADER's compound sentiment of the completion, in [-1, 1], in TRL GRPOTrainer's reward signature. It is the kind of
reward a user writes first, and it can be gamed as users' rewards can: a string of positive words ("love great happy
wonderful") scores near 1 and reads as nothing. The study beside it (studies/own_task.yaml) tunes a held-out judge
instead, the text task's gold, which scores fluency as well as positivity and which the policy never trains on.
"""

from __future__ import annotations

import functools
from typing import Any

from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer


@functools.cache
def _analyzer() -> SentimentIntensityAnalyzer:
    return SentimentIntensityAnalyzer()


def _text(completion: str | list[dict[str, Any]]) -> str:
    return completion if isinstance(completion, str) else "\n".join(str(m.get("content") or "") for m in completion)


def sentiment(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """Each completion's VADER compound score: -1 (negative) to 1 (positive), 0 for neutral or empty text."""
    return [float(_analyzer().polarity_scores(_text(completion))["compound"]) for completion in completions]
