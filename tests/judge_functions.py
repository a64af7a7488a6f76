"""Held-out judges that tests name as ``module:name``: pointwise ones in TRL GRPOTrainer's reward signature, and
pairwise ones in the signature of TRL's ``BasePairwiseJudge.judge`` (TRL 0.11-0.2x shipped the class; the TRL
installed here, 1.16, no longer does, so a judge written for it is a plain class with that method). Each records what
it was shown, so a test can check that a judge sees the held-out answers and nothing else."""

from __future__ import annotations

from typing import Any

SEEN: dict[str, list[Any]] = {"letters": [], "length": [], "pairs": []}


def _text(completion: Any) -> str:
    return completion if isinstance(completion, str) else completion[0]["content"]


def count_letter_b(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """How often a response says 'b': a judge the training reward (which counts 'a') never sees."""
    scores = [float(_text(completion).split().count("b")) for completion in completions]
    SEEN["letters"].append((list(prompts), [_text(completion) for completion in completions], scores))
    return scores


def word_count(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """A response's words, or no score (None) for an empty one."""
    scores: list[float | None] = [float(len(_text(c).split())) or None for c in completions]
    SEEN["length"].append((list(prompts), [_text(completion) for completion in completions], scores))
    return scores  # type: ignore[return-value]


class LongerWins:
    """Prefers the longer of two answers; a tie it cannot decide (-1)."""

    def judge(self, prompts: list[str], completions: list[list[str]], shuffle_order: bool = True) -> list[int]:
        SEEN["pairs"].append((list(prompts), [list(pair) for pair in completions]))
        return [-1 if len(first) == len(second) else int(len(second) > len(first)) for first, second in completions]


class WrongLength:
    """Answers one choice too few."""

    def judge(self, prompts: list[str], completions: list[list[str]], shuffle_order: bool = True) -> list[int]:
        return [0] * (len(completions) - 1)


def clear() -> None:
    for calls in SEEN.values():
        calls.clear()
