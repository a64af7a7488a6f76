"""Sampling responses from the policy, with the log-probabilities of what was sampled."""

from __future__ import annotations

import torch
from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

from ppo_core.sequences import response_mask_after_stop, token_logprobs


def sampling_config(max_new_tokens: int, temperature: float, tokenizer: PreTrainedTokenizerBase,
                    stop_token_id: int | None) -> GenerationConfig:
    """Pure sampling from softmax(z / T): no top-k, top-p or penalties from the model's own defaults."""
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
        output_logits=True,
    )


@torch.no_grad()
def generate(
    policy: PreTrainedModel,
    queries: torch.Tensor,
    query_mask: torch.Tensor,
    generation_config: GenerationConfig,
    stop_token_id: int | None,
    pad_token_id: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sample responses and their log-probabilities at the sampling temperature.

    The log-probabilities come from the logits that generation already computed, so the rollout
    needs no second forward pass of the policy. Returns ``(responses, response_mask, logprobs)``.
    """
    output = policy.generate(  # type: ignore[operator]  # nn.Module.__getattr__ hides the mixin's method
        input_ids=queries,
        attention_mask=query_mask,
        generation_config=generation_config,
    )
    responses = output.sequences[:, queries.shape[1]:]
    logits = torch.stack(output.logits, dim=1)
    response_mask = response_mask_after_stop(responses, stop_token_id)
    responses = torch.where(response_mask, responses, torch.full_like(responses, pad_token_id))
    logprobs = token_logprobs(logits, responses, generation_config.temperature)
    return responses, response_mask, logprobs
