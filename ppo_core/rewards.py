"""Reward sources: a sequence-classification model, a Python callable ``module:function``, or a task's RM.

Every source takes the prompts and the decoded responses as text and returns one score per row,
so the reward model may use a tokenizer different from the policy's.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, PreTrainedModel

from ppo_core.config import ConfigError
from ppo_core.sequences import position_ids_from_mask


class RewardFunction(Protocol):
    def __call__(self, prompts: Sequence[str], responses: Sequence[str]) -> torch.Tensor: ...


def concatenate(prompt: str, response: str) -> str:
    return prompt + response


class SequenceClassifierReward:
    """Scores ``reward_text(prompt, response)`` with a one-label sequence-classification model."""

    def __init__(
        self,
        path: str,
        batch_size: int,
        reward_text: Callable[[str, str], str] = concatenate,
    ) -> None:
        try:
            self.model: PreTrainedModel = AutoModelForSequenceClassification.from_pretrained(
                path, dtype=torch.float32
            ).eval()
            self.tokenizer = AutoTokenizer.from_pretrained(path, padding_side="right")
        except (OSError, ValueError) as error:
            raise ConfigError(f"reward_model_path: cannot load a reward model from {path!r} ({error})") from None
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.path = path
        self.batch_size = batch_size
        self.reward_text = reward_text

    def to(self, device: torch.device) -> SequenceClassifierReward:
        self.model.to(device)  # type: ignore[arg-type]  # transformers types .to() as a decorator
        return self

    @torch.no_grad()
    def __call__(self, prompts: Sequence[str], responses: Sequence[str]) -> torch.Tensor:
        texts = [self.reward_text(p, r) for p, r in zip(prompts, responses, strict=True)]
        device = self.model.device
        scores = []
        for start in range(0, len(texts), self.batch_size):
            batch = self.tokenizer(texts[start : start + self.batch_size], return_tensors="pt", padding=True)
            scores.append(self._score(batch["input_ids"].to(device), batch["attention_mask"].to(device)))
        return torch.cat(scores).float()

    def _score(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        # The head is read at the last attended token, found from the mask rather than the pad id:
        # models whose pad token is EOS would otherwise be scored one token early.
        head = getattr(self.model, "score", None)
        if head is None:
            return self.model(input_ids=input_ids, attention_mask=attention_mask).logits[:, 0]
        hidden = self.model.base_model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids_from_mask(attention_mask),
        ).last_hidden_state
        last = attention_mask.long().sum(dim=1) - 1
        return head(hidden[torch.arange(hidden.shape[0], device=hidden.device), last])[:, 0]


class CallableReward:
    """A plain function ``f(prompts, responses) -> scores`` named as ``module:function``."""

    def __init__(self, spec: str) -> None:
        module_name, _, function_name = spec.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise ConfigError(f"reward_model_path: cannot import module {module_name!r} ({error})") from None
        function = getattr(module, function_name, None)
        if not callable(function):
            raise ConfigError(f"reward_model_path: {module_name!r} has no callable {function_name!r}")
        self.function = function
        self.spec = spec

    def to(self, device: torch.device) -> CallableReward:
        return self

    def __call__(self, prompts: Sequence[str], responses: Sequence[str]) -> torch.Tensor:
        scores = torch.as_tensor(self.function(list(prompts), list(responses)), dtype=torch.float32).flatten()
        if scores.numel() != len(prompts):
            raise ValueError(f"reward function {self.spec} returned {scores.numel()} scores for {len(prompts)} rows")
        return scores


def is_callable_spec(spec: str) -> bool:
    """``module:function`` rather than a path or hub name (a Windows drive letter is not a module)."""
    module_name, sep, function_name = spec.partition(":")
    return bool(sep) and module_name.replace(".", "").replace("_", "").isalnum() and function_name.isidentifier() \
        and not Path(spec).exists() and len(module_name) > 1


def load_reward(
    spec: str, batch_size: int, reward_text: Callable[[str, str], str] = concatenate
) -> SequenceClassifierReward | CallableReward:
    """The reward a ``reward_model_path`` names: ``module:function`` or a model directory / hub name."""
    if is_callable_spec(spec):
        return CallableReward(spec)
    return SequenceClassifierReward(spec, batch_size, reward_text)
