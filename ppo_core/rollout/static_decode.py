"""Decoding with a static KV cache, exactly the response length, with no host sync per token (``static_decode``).

HF ``generate`` with its default dynamic cache runs each token as an eager forward, and checks on the host at every
step whether all rows have finished. This loop instead:

- left-pads the prompts to a width bucket (:func:`bucket_width`), so that a trial's compiled step sees one prompt
  width, or a few, instead of one per batch;
- fills a transformers ``StaticCache`` sized to that width plus the response length, with one prefill forward;
- then runs exactly ``max_new_tokens`` decode steps, each one forward of one token and one draw from
  softmax(z / T), never reading a tensor on the host. A row that emitted its stop token keeps sampling; what follows
  the stop token is masked and replaced by pad afterwards, as ``ppo_core.models.generation.generate`` does with HF's
  output.

On a CUDA device the step (the model's forward) is compiled (:func:`decode_step`). Run eagerly, on the CPU, the loop
draws the same tokens as ``generate``: the same distribution, the same random draws in the same order.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import torch
from transformers import PreTrainedModel, StaticCache

from ppo_core.models.sequences import position_ids_from_mask, response_mask_after_stop

BUCKET = 32
"""Prompt widths are rounded up to a multiple of this many tokens."""

Step = Callable[..., Any]


def bucket_width(width: int, bucket: int = BUCKET) -> int:
    """ceil(width / bucket) x bucket: the padded prompt width."""
    return -(-width // bucket) * bucket


def left_pad(queries: torch.Tensor, query_mask: torch.Tensor, width: int,
             pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompts left-padded to ``width`` columns: pad ids, and 0 in the attention mask."""
    extra = width - queries.shape[1]
    if extra <= 0:
        return queries, query_mask
    ids = torch.full((queries.shape[0], extra), pad_token_id, dtype=queries.dtype, device=queries.device)
    zeros = torch.zeros((queries.shape[0], extra), dtype=query_mask.dtype, device=query_mask.device)
    return torch.cat([ids, queries], dim=1), torch.cat([zeros, query_mask], dim=1)


def draw(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """y ~ softmax(z / T), computed in float32 as HF's sampling computes it (one ``multinomial`` draw per row)."""
    probabilities = torch.softmax(logits.float() / temperature, dim=-1)
    return torch.multinomial(probabilities, num_samples=1).squeeze(1)


_CACHES: weakref.WeakKeyDictionary[PreTrainedModel, dict[tuple[int, int], StaticCache]] = weakref.WeakKeyDictionary()


def reset_cache(model: PreTrainedModel, rows: int, length: int) -> StaticCache:
    """The model's static cache for ``rows`` x ``length``, emptied: one per shape, kept across rollouts, so a compiled
    step (its CUDA graphs capture the cache's buffers) is replayed rather than captured again."""
    caches = _CACHES.setdefault(model, {})
    if (rows, length) not in caches:
        caches[(rows, length)] = StaticCache(config=model.config, max_cache_len=length)
    cache = caches[(rows, length)]
    cache.reset()
    return cache


@functools.cache
def _compiled(forward: Step) -> Step:
    # CUDA graphs replay the step without launching its kernels one by one; the static cache keeps the shapes fixed.
    return torch.compile(forward, mode="reduce-overhead")


def decode_step(model: PreTrainedModel, compiled: bool) -> Step:
    """The model's forward, compiled when ``compiled`` (a CUDA device), eager otherwise."""
    return _compiled(model.forward) if compiled else model.forward


@torch.no_grad()
def static_generate(model: PreTrainedModel, queries: torch.Tensor, query_mask: torch.Tensor, max_new_tokens: int,
                    temperature: float, stop_token_id: int | None, pad_token_id: int,
                    compiled: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample ``max_new_tokens`` tokens per prompt; returns ``(responses, response_mask)`` as
    ``ppo_core.models.generation.generate`` does: pad after each response's stop token."""
    width = bucket_width(queries.shape[1])
    ids, prompt_mask = left_pad(queries, query_mask, width, pad_token_id)
    rows, length = ids.shape[0], width + max_new_tokens
    # The whole sequence's mask from the start: a response position is attended once written, and the causal mask
    # built from cache_position hides the ones not yet written, so every step sees the same shapes.
    mask = torch.cat([prompt_mask, torch.ones((rows, max_new_tokens), dtype=prompt_mask.dtype,
                                              device=prompt_mask.device)], dim=1)
    positions = position_ids_from_mask(mask)
    cache = reset_cache(model, rows, length)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions[:, :width], past_key_values=cache,
                   use_cache=True, cache_position=torch.arange(width, device=ids.device), logits_to_keep=1).logits
    step = decode_step(model, compiled)
    tokens = []
    for index in range(max_new_tokens):
        token = draw(logits[:, -1], temperature)
        tokens.append(token)
        if index + 1 == max_new_tokens:
            break
        at = width + index
        logits = step(input_ids=token.unsqueeze(1), attention_mask=mask, position_ids=positions[:, at : at + 1],
                      past_key_values=cache, use_cache=True, cache_position=torch.tensor([at], device=ids.device),
                      logits_to_keep=1).logits
        if compiled:  # the graph's output buffer is overwritten by the next replay
            logits = logits.clone()
    responses = torch.stack(tokens, dim=1)
    response_mask = response_mask_after_stop(responses, stop_token_id)
    responses = torch.where(response_mask, responses, torch.full_like(responses, pad_token_id))
    return responses, response_mask


__all__ = ["bucket_width", "decode_step", "draw", "left_pad", "reset_cache", "static_generate"]
