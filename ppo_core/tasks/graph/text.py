"""The text format of the shortest-path task: prompts, responses and reward-model inputs.

Everything that turns graph objects into strings (or back) lives here, so the SFT data,
the reward-model pairs, the gold scorer and the PPO trainer all agree on one format:

- prompt:   ``"from 3 to 7 :"``  (the tokenizer prepends ``<bos>``)
- response: ``"5 9 7"``          (the nodes visited after the start, space separated;
  the policy ends it with ``<eos>``, which is not part of the decoded text)
- RM input: ``"from 3 to 7 : 5 9 7"`` (see :func:`ppo_core.tasks.reward_model.format_for_reward`)
"""

from __future__ import annotations

import re

PROMPT_WORDS: tuple[str, ...] = ("from", "to", ":")

_PROMPT_RE = re.compile(r"^\s*from\s+(\d+)\s+to\s+(\d+)\s+:\s*$")


def make_prompt(start: int, goal: int) -> str:
    """Return the prompt that asks for a walk from ``start`` to ``goal``."""
    return f"from {start} to {goal} :"


def parse_prompt(prompt: str) -> tuple[int, int]:
    """Return ``(start, goal)`` from a prompt made by :func:`make_prompt`.

    Raises ``ValueError`` for anything else: a malformed prompt is a caller bug, not a
    bad response, so it must not be silently scored.
    """
    match = _PROMPT_RE.match(prompt)
    if match is None:
        raise ValueError(f"not a shortest-path prompt: {prompt!r}")
    return int(match.group(1)), int(match.group(2))


def format_walk(nodes: list[int]) -> str:
    """Return the response text for a walk given as the nodes visited after the start."""
    return " ".join(str(node) for node in nodes)


def split_response(response: str) -> list[str]:
    """Split a response into its whitespace-separated words (node names or garbage)."""
    return response.split()
