"""Plain Python reward functions, in TRL GRPOTrainer's signature, that tests name as ``module:function``."""

from __future__ import annotations

from typing import Any


def count_letter_a(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """Rewards responses for saying 'a': an easy target that PPO should learn quickly."""
    return [float(_text(completion).split().count("a")) for completion in completions]


def wrong_length(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    return [0.0]


def nan_reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    return [float("nan")] * len(completions)


def _text(completion: Any) -> str:
    """A completion's text, in the standard format (a string) or the conversational one (a message list)."""
    return completion if isinstance(completion, str) else completion[0]["content"]


def raises(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    raise ValueError("this reward is broken")


def words(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[str]:
    return ["high"] * len(completions)


def none_for_odd_rows(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
    """A reward that only applies to every other row, as TRL's reward functions may say with None."""
    return [1.0 if index % 2 == 0 else None for index in range(len(completions))]
