"""The reward function for the bring-your-own example: completions are rewarded for words with a requested letter.

It has the signature of a TRL ``GRPOTrainer`` reward function, so the same file works with TRL:

    def reward_func(prompts, completions, **kwargs) -> list[float]

``prompts`` and ``completions`` hold one entry per row. In the standard format each is a string; in the
conversational format each is a list of chat messages, and a completion is ``[{"role": "assistant",
"content": "..."}]``. Every dataset column other than ``prompt`` arrives as a keyword argument holding one value
per row: here the dataset's ``letter`` column. Other keyword arguments a trainer passes are ignored.
"""

from __future__ import annotations

from typing import Any


def completion_text(completion: str | list[dict[str, Any]]) -> str:
    """The text of a completion: the string itself, or the contents of its messages joined by newlines."""
    if isinstance(completion, str):
        return completion
    return "\n".join(str(message.get("content") or "") for message in completion)


def share_of_words_with(text: str, letter: str) -> float:
    """The share of ``text``'s whitespace-separated words that contain ``letter`` (either case); 0.0 for no words.

    A share rather than a count, so the reward cannot grow just by writing longer completions, and it lies in
    [0, 1], so curves from different runs compare directly.
    """
    words = text.lower().split()
    if not words:
        return 0.0
    return sum(letter.lower() in word for word in words) / len(words)


def letter_reward(
    prompts: list[Any], completions: list[str | list[dict[str, Any]]], letter: list[str], **kwargs: Any
) -> list[float]:
    """One reward per row: the share of the completion's words that contain that row's ``letter``.

    A tiny random policy raises it within a few dozen PPO updates: every letter is a token of its own in its
    vocabulary, and common letters already turn up in some of its random words.
    """
    return [
        share_of_words_with(completion_text(completion), wanted)
        for completion, wanted in zip(completions, letter, strict=True)
    ]
