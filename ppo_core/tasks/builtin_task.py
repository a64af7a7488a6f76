"""The object a built-in task hands to the PPO trainer and the tuner."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BuiltinTask:
    """A ready-to-train RLHF task: SFT policy, proxy reward model, prompts and a gold scorer.

    The two paths are directories loadable offline with ``AutoModelForCausalLM`` /
    ``AutoModelForSequenceClassification`` and ``AutoTokenizer``. PPO optimises the proxy
    reward model, which scores ``reward_text(prompt, response)``; ``gold_score`` is the true
    objective, for evaluation only.
    """

    name: str
    policy_path: str
    reward_model_path: str
    train_prompts: list[str]
    eval_prompts: list[str]
    gold_score: Callable[[list[str], list[str]], list[float]]
    reward_text: Callable[[str, str], str]
    response_length: int
    info: dict[str, Any]
