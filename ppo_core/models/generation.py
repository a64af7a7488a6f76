"""Sampling responses from the policy: exactly softmax(z / T), whatever the model's own files ask for."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Literal

import torch
from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

from ppo_core.config.ppo_config import ConfigError
from ppo_core.models.sequences import response_mask_after_stop


def stop_id(stop_token: Literal["eos"] | None, stop_token_id: int | None,
            tokenizer: PreTrainedTokenizerBase) -> int | None:
    """The token that ends a response: the tokenizer's EOS for ``stop_token: eos``, else ``stop_token_id`` (None:
    nothing ends one early)."""
    if stop_token == "eos":
        if tokenizer.eos_token_id is None:
            raise ConfigError("stop_token: the tokenizer has no EOS token; set stop_token_id instead")
        return int(tokenizer.eos_token_id)
    return stop_token_id


def sampling_config(max_new_tokens: int, temperature: float, tokenizer: PreTrainedTokenizerBase,
                    stop_token_id: int | None) -> GenerationConfig:
    """Pure sampling from softmax(z / T): no top-k, top-p, penalties or suppressed tokens.

    With ``stop_token_id`` None nothing stops a response early, so every response is ``max_new_tokens`` long.
    """
    return GenerationConfig(
        max_new_tokens=max_new_tokens,
        min_new_tokens=0,
        do_sample=True,
        temperature=temperature,
        top_k=0,
        top_p=1.0,
        eos_token_id=stop_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        return_dict_in_generate=True,
    )


@contextlib.contextmanager
def without_model_generation_defaults(model: PreTrainedModel) -> Iterator[None]:
    """Hide the model's generation_config.json from ``generate`` for the duration of the block.

    transformers fills every field our config leaves None (the EOS id among them) from the model's own file,
    which may carry repetition penalties, top-k, suppressed tokens and the like; PPO's log-probabilities
    describe softmax(z / T) alone. The model keeps its file for saving.
    """
    own = model.generation_config
    model.generation_config = GenerationConfig()
    try:
        yield
    finally:
        model.generation_config = own


@torch.no_grad()
def generate(
    policy: PreTrainedModel,
    queries: torch.Tensor,
    query_mask: torch.Tensor,
    generation_config: GenerationConfig,
    stop_token_id: int | None,
    pad_token_id: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample responses; returns ``(responses, response_mask)`` with pad after each response's stop token."""
    with without_model_generation_defaults(policy):
        output = policy.generate(  # type: ignore[operator]  # nn.Module.__getattr__ hides the mixin's method
            input_ids=queries,
            attention_mask=query_mask,
            generation_config=generation_config,
        )
    responses = output.sequences[:, queries.shape[1]:]
    response_mask = response_mask_after_stop(responses, stop_token_id)
    responses = torch.where(response_mask, responses, torch.full_like(responses, pad_token_id))
    return responses, response_mask
