"""Prompts that several rows share, run through a model once.

A GRPO rollout answers each prompt G times and a held-out evaluation ``num_eval_samples`` times, so a batch's
prompt part is mostly copies. A forward over prompt + response spends most of its work on the prompt (38 of 54
tokens at the SmolLM2 study's settings). Here the distinct prompts are run once, with a KV cache; the cache and the
last prompt position's logits are copied out to the rows that share each prompt; and only the responses run on top.

The logits are those of one forward over the whole sequence, up to float rounding (the same products, in another
order and batch shape). The update's forward shares prompts too, with gradients: the copies of a prompt's keys and
values are an index into the prompt pass's, so each row's gradient flows back into the one pass. Where a result
must match another forward bit for bit (the policy's log-probabilities that the update's first ratio divides by),
both sides compute the same way: the rollout shares prompts for an update exactly where the update does
(``ppo_core.rollout.collect.update_shares_prompts``); :func:`can_share` is the caller's switch too.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from peft import PeftModel
from transformers import DynamicCache, PreTrainedModel

from ppo_core.models.sequences import position_ids_from_mask


def distinct_rows(queries: torch.Tensor, query_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(first, inverse)``: the first row of each distinct prompt (ids and mask alike), in the order the rows give
    them, and for every row the index into ``first`` of its prompt, so that ``queries[first][inverse]`` equals
    ``queries``. Rows that are all distinct give ``first`` = 0 .. B-1: the prompts run in the batch's own order."""
    key = torch.cat([queries, query_mask.long()], dim=1)
    _, inverse = torch.unique(key, dim=0, return_inverse=True)
    rows = torch.arange(len(key), device=key.device)
    first = torch.full((int(inverse.max()) + 1,), len(key), device=key.device, dtype=torch.long)
    first = first.scatter_reduce(0, inverse, rows, reduce="amin")
    # torch.unique numbers the prompts in sorted order; renumber them by where each first appears.
    first, order = first.sort()
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order), device=key.device)
    return first, rank[inverse]


def unwrapped(model: PreTrainedModel) -> PreTrainedModel:
    """The model inside a DistributedDataParallel wrapper (the update's policy on several processes), whose config
    and forward signature the wrapper does not expose; ``model`` itself otherwise. Its forwards still go through
    the wrapper, whose hooks average the gradients."""
    inner: PreTrainedModel = model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model
    return inner


def cache_keyword(model: PreTrainedModel) -> str:
    """The forward's name for the KV cache: ``cache`` in newer transformers 5 releases, ``past_key_values`` before
    (still accepted, with a deprecation warning, where ``cache`` exists)."""
    model = unwrapped(model)
    inner = model.get_base_model() if isinstance(model, PeftModel) else model
    return "cache" if "cache" in inspect.signature(inner.forward).parameters else "past_key_values"


def can_share(model: PreTrainedModel) -> bool:
    """Whether ``model`` keeps a KV cache in its forward: not while gradient checkpointing in training mode, where
    transformers turns ``use_cache`` off. Read under transformers 5's name for it, where the model has it: the old
    name still answers, with a deprecation warning every call."""
    model = unwrapped(model)
    inner = model.get_base_model() if isinstance(model, PeftModel) else model
    checkpointing = getattr(inner, "is_activation_checkpointing", None)
    if checkpointing is None:
        checkpointing = getattr(inner, "is_gradient_checkpointing", False)
    return not (bool(checkpointing) and model.training)


@dataclass(frozen=True)
class PromptPass:
    """The distinct prompts run through a model once: each layer's keys and values and the last position's logits
    per distinct prompt, and for every row the index of its prompt among them. A model whose cache layers hold no
    plain keys and values (linear attention) runs every row instead, and its one cache is ``whole``."""

    layers: list[tuple[torch.Tensor, torch.Tensor]]
    logits: torch.Tensor  # [D, V]
    inverse: torch.Tensor  # [B]
    whole: dict[str, DynamicCache] | None = None

    def cache(self, model: PreTrainedModel) -> dict[str, DynamicCache]:
        """A new KV cache of every row's prompt, as ``model``'s forward takes it (a forward appends to the cache it
        is given; the kept keys and values are copied out by row, never written to)."""
        if self.whole is not None:
            return self.whole
        rows = [(keys[self.inverse], values[self.inverse]) for keys, values in self.layers]
        return {cache_keyword(model): DynamicCache(ddp_cache_data=rows, config=unwrapped(model).config)}

    def row_logits(self) -> torch.Tensor:
        """[B, V]: the logits that predict each row's first response token."""
        return self.logits[self.inverse]


def layer_states(cache: DynamicCache) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """Each layer's keys and values, or None when a layer keeps other state."""
    states = []
    for layer in cache.layers:
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if not (isinstance(keys, torch.Tensor) and isinstance(values, torch.Tensor)):
            return None
        states.append((keys, values))
    return states


def run_prompts(model: PreTrainedModel, queries: torch.Tensor, query_mask: torch.Tensor,
                ) -> tuple[DynamicCache, torch.Tensor]:
    """Left-padded prompts through ``model`` with a new KV cache: the cache and the last position's logits [N, V]."""
    cache = DynamicCache(config=unwrapped(model).config)
    mask = query_mask.long()
    width = queries.shape[1]
    logits = model(input_ids=queries, attention_mask=mask, position_ids=position_ids_from_mask(mask),
                   use_cache=True, logits_to_keep=torch.tensor([width - 1], device=queries.device),
                   **{cache_keyword(model): cache}).logits[:, -1]
    return cache, logits


def prompt_pass(model: PreTrainedModel, queries: torch.Tensor, query_mask: torch.Tensor) -> PromptPass:
    """Each distinct prompt (left-padded ``queries`` and ``query_mask`` alike) through ``model`` once, with a KV
    cache, keeping only the last position's logits."""
    first, inverse = distinct_rows(queries, query_mask)
    cache, logits = run_prompts(model, queries[first], query_mask[first])
    states = layer_states(cache)
    if states is not None:
        return PromptPass(states, logits, inverse)
    cache, logits = run_prompts(model, queries, query_mask)
    rows = torch.arange(len(queries), device=queries.device)
    return PromptPass([], logits, rows, whole={cache_keyword(model): cache})


MEMO_ENTRIES = 8
"""Prompt passes a memo keeps: a held-out evaluation's chunks (local_rollout_forward_batch_size rows each)."""


class PromptMemo:
    """A frozen model's :func:`prompt_pass` of the prompts it was given, kept for the next call with the same
    prompts: the held-out prompts are the same at every evaluation and the reference never changes, so after the
    first evaluation its scoring runs the responses alone."""

    def __init__(self) -> None:
        self._passes: list[tuple[tuple[torch.Tensor, torch.Tensor, int, object], PromptPass]] = []

    def prompt_pass(self, model: PreTrainedModel, queries: torch.Tensor, query_mask: torch.Tensor) -> PromptPass:
        """:func:`prompt_pass`'s result, computed again only when the model, the prompts or the autocast differ."""
        autocast = (torch.is_autocast_enabled(queries.device.type), torch.get_autocast_dtype(queries.device.type))
        for (kept_queries, kept_mask, model_id, kept_autocast), found in self._passes:
            if (model_id, kept_autocast) == (id(model), autocast) and torch.equal(kept_queries, queries) \
                    and torch.equal(kept_mask, query_mask):
                return found
        made = prompt_pass(model, queries, query_mask)
        if made.whole is not None:  # its one cache is spent by the call it is made for
            return made
        self._passes = [*self._passes[1 - MEMO_ENTRIES:], ((queries.clone(), query_mask.clone(), id(model), autocast),
                                                           made)]
        return made


def shared_response_logits(model: PreTrainedModel, queries: torch.Tensor, query_mask: torch.Tensor,
                           responses: torch.Tensor, response_mask: torch.Tensor,
                           memo: PromptMemo | None = None) -> torch.Tensor:
    """Logits [B, R, V] that predict each response token, as ``ppo_core.rollout.collect.response_logits`` returns them:
    position Q-1 from :func:`prompt_pass` (``memo``'s, when given), positions Q .. Q+R-2 from one cached forward over
    responses[:, :R-1]."""
    prompts = (memo.prompt_pass if memo is not None else prompt_pass)(model, queries, query_mask)
    cache, last = prompts.cache(model), prompts.row_logits()
    if responses.shape[1] == 1:
        return last.unsqueeze(1)
    mask = torch.cat([query_mask.long(), response_mask.long()], dim=1)
    positions = position_ids_from_mask(mask)[:, queries.shape[1]:-1]
    rest = model(input_ids=responses[:, :-1], attention_mask=mask[:, :-1], position_ids=positions, use_cache=True,
                 **cache).logits
    return torch.cat([last.unsqueeze(1).to(rest.dtype), rest], dim=1)


__all__ = ["PromptMemo", "PromptPass", "cache_keyword", "can_share", "distinct_rows", "layer_states", "prompt_pass",
           "shared_response_logits", "unwrapped"]
