"""Plain Python reward functions that tests name as ``module:function``."""

from __future__ import annotations


def count_letter_a(prompts: list[str], responses: list[str]) -> list[float]:
    """Rewards responses for saying 'a': an easy target that PPO should learn quickly."""
    return [float(response.split().count("a")) for response in responses]


def wrong_length(prompts: list[str], responses: list[str]) -> list[float]:
    return [0.0]


def nan_reward(prompts: list[str], responses: list[str]) -> list[float]:
    return [float("nan")] * len(responses)
