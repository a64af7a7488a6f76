"""Sampling responses on a CPU: one prefill of the distinct prompts (``ppo_core.rollout.shared_prompts``), then one
cached forward per token, each token drawn from exactly softmax(z / T) by inverse transform sampling.

It samples what HF ``generate`` samples under :func:`ppo_core.models.generation.sampling_config` (the same distribution,
other random draws), and stops as it does: at ``max_new_tokens``, or once every row has emitted its stop token.
Three costs of ``generate`` that dominated a CPU rollout are gone (SmolLM2-135M, one thread, an AMD EPYC with
AVX-512 BF16; ``python -m benchmarks.real_model_phases``):

- its prefill asks for the last position's logits with the integer ``logits_to_keep=1``; the model slices
  ``h[:, -1:]``, a view with the whole prompt's batch stride, and with frozen weights torch runs the vocabulary
  projection as a batched product against the weight expanded over the batch. In bf16 that copies a B x H x V tensor
  first: 0.5 s of a 0.75 s prefill at batch 8. An index tensor gathers the rows instead (as
  ``ppo_core.rollout.collect.kept_positions`` does for the scoring forward);
- ``torch.multinomial`` draws an exponential variate for every vocabulary entry of every row, 6 ms a step at batch
  8 over 49,152 tokens; inversion needs one uniform variate a row and cumulative sums (:func:`draw`);
- its per-step logits processors and stopping checks, small beside the rest.

Rows that emitted their stop token keep sampling until every row has; what follows a stop token is masked and replaced
by pad afterwards, as ``ppo_core.models.generation.generate`` does with HF's output.

A held-out evaluation runs the same loop with the reference stepped beside the sampler (:func:`sample_beside`) and
reads both log-probabilities of each sampled token from the steps' logits: on SmolLM2-135M at the evaluation's 64 rows
(one thread, an AMD EPYC of family 25, bf16) that took 5.2 s where sampling and then two scoring forwards took 7.8.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel

from ppo_core.models.sequences import position_ids_from_mask, response_mask_after_stop, token_logprobs
from ppo_core.rollout.fused_decode import decoder_of
from ppo_core.rollout.shared_prompts import prompt_pass

BLOCK = 256
"""Vocabulary entries a draw's second level sums over: the first level sums V / BLOCK block totals."""


def draw(logits: torch.Tensor, temperature: float, block: int = BLOCK) -> torch.Tensor:
    """One token per row, y ~ softmax(z / T), by inversion: y = min{i : c_i > u c_V}, u ~ U[0, 1), where
    c_i = sum_{j <= i} p_j and p = softmax(z / T), found in two levels: the block b = min{b : C_b > u C_last} of the
    cumulative block totals C_b = sum_{b' <= b} sum_{i in b'} p_i, then the entry of b whose cumulative sum within
    the block passes u C_last - C_{b-1}.

    The sums are taken in float64, so a token's interval is its weight to float32's own precision wherever it sits in
    the vocabulary, and a token of weight 0 (a logit of -inf) has an empty interval. Two levels draw the token one
    level draws for the same u (up to the sums' rounding) at a fraction of the cost: a float64 cumulative sum over the
    whole vocabulary, one entry after another, took most of a CPU decode step's draw (about 3 ms of a bf16 step at 8
    rows over SmolLM2's 49,152 tokens, against 0.5 for this draw).
    """
    rows, vocab = logits.shape
    scaled = logits if temperature == 1.0 else logits.float() / temperature
    weights = torch.softmax(scaled, dim=-1, dtype=torch.float32)
    padded = nn.functional.pad(weights, (0, -vocab % block)) if vocab % block else weights
    blocks = padded.view(rows, -1, block)
    totals = blocks.sum(dim=-1, dtype=torch.float64)
    ends = totals.cumsum(dim=-1)
    threshold = torch.rand((rows, 1), dtype=torch.float64, device=logits.device) * ends[:, -1:]
    chosen = torch.searchsorted(ends, threshold, right=True).clamp_max(ends.shape[-1] - 1)
    inside = threshold - (ends.gather(1, chosen) - totals.gather(1, chosen))
    within = blocks.gather(1, chosen.unsqueeze(-1).expand(rows, 1, block)).squeeze(1).cumsum(dim=-1,
                                                                                            dtype=torch.float64)
    offset = torch.searchsorted(within, inside, right=True).clamp_max(block - 1)
    return (chosen * block + offset).squeeze(1).clamp_max(vocab - 1)


Step = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""(token [B], position ids [B, 1], attention mask [B, L]) -> the next logits [B, V], the token appended."""


def prompts_then_steps(model: PreTrainedModel, queries: torch.Tensor, query_mask: torch.Tensor,
                       max_new_tokens: int) -> tuple[torch.Tensor, Step]:
    """The logits [B, V] that predict each row's first new token, and the decode step after them: through the
    model's :class:`ppo_core.rollout.fused_decode.FusedDecoder` where the sampling copy built one, else the model's
    own forward with its KV cache. Either way a prompt several rows share runs once."""
    decoder = decoder_of(model)
    if decoder is not None:
        kept, logits = decoder.prefill(queries, query_mask, queries.shape[1] + max_new_tokens)

        def fused(token: torch.Tensor, position: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return decoder.step(token, position, mask, kept, mask.shape[1] - 1)
        return logits, fused
    prompts = prompt_pass(model, queries, query_mask)
    cache = prompts.cache(model)

    def forward(token: torch.Tensor, position: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = model(input_ids=token.unsqueeze(1), attention_mask=mask, position_ids=position,
                                     use_cache=True, **cache).logits
        return logits[:, -1]
    return prompts.row_logits(), forward


@torch.no_grad()
def loop_logits(model: PreTrainedModel, queries: torch.Tensor, query_mask: torch.Tensor,
                responses: torch.Tensor) -> torch.Tensor:
    """[B, T, V]: the logits the sampling loop draws each of ``responses``' T tokens from, the loop's own prefill and
    steps fed the responses (teacher-forced): what a check of the loop's numerics reads."""
    logits, step = prompts_then_steps(model, queries, query_mask, responses.shape[1])
    mask = query_mask.long()
    position, read = position_ids_from_mask(mask)[:, -1:], [logits]
    for column in range(responses.shape[1] - 1):
        mask = torch.cat([mask, mask.new_ones((len(mask), 1))], dim=1)
        position = position + 1
        read.append(step(responses[:, column], position, mask))
    return torch.stack(read, dim=1)


@torch.no_grad()
def sample_responses(model: PreTrainedModel, queries: torch.Tensor, query_mask: torch.Tensor, max_new_tokens: int,
                     temperature: float, stop_token_id: int | None,
                     pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample up to ``max_new_tokens`` tokens after each left-padded prompt; returns ``(responses, response_mask)``
    as ``ppo_core.models.generation.generate`` does: pad after each response's stop token, and as many columns as the
    longest response took (fewer than ``max_new_tokens`` when every row stopped early)."""
    sampled = sample_beside(model, None, queries, query_mask, max_new_tokens, temperature, stop_token_id,
                            pad_token_id)
    return sampled.responses, sampled.response_mask


@dataclass(frozen=True)
class Stepped:
    """Responses sampled from one model with a second stepped beside it: [B, R] tensors, the log-probabilities at the
    sampling temperature of each sampled token under each, 0 after a response's stop token ([B, 0] with no second
    model)."""

    responses: torch.Tensor
    response_mask: torch.Tensor
    logprobs: torch.Tensor
    reference_logprobs: torch.Tensor


@torch.no_grad()
def sample_beside(model: PreTrainedModel, reference: PreTrainedModel | None, queries: torch.Tensor,
                  query_mask: torch.Tensor, max_new_tokens: int, temperature: float, stop_token_id: int | None,
                  pad_token_id: int) -> Stepped:
    """:func:`sample_responses` from ``model``, with ``reference`` (when given) fed the same tokens step by step:
    each sampled token's log-probability log softmax(z / T)[y] under both, read from the logits the steps computed
    anyway. Two models computed alike (the same code, dtype and weights' packing) give the same logits at every step
    where their weights are equal, so a policy equal to its reference reads KL 0 exactly."""
    rows = queries.shape[0]
    logits, step = prompts_then_steps(model, queries, query_mask, max_new_tokens)
    beside = prompts_then_steps(reference, queries, query_mask, max_new_tokens) if reference is not None else None
    mask = query_mask.long()
    position = position_ids_from_mask(mask)[:, -1:]
    stopped = torch.zeros(rows, dtype=torch.bool, device=queries.device)
    tokens: list[torch.Tensor] = []
    read: tuple[list[torch.Tensor], list[torch.Tensor]] = ([], [])
    for index in range(max_new_tokens):
        token = draw(logits, temperature)
        tokens.append(token)
        if beside is not None:
            read[0].append(token_logprobs(logits[:, None], token[:, None], temperature)[:, 0])
            read[1].append(token_logprobs(beside[0][:, None], token[:, None], temperature)[:, 0])
        if stop_token_id is not None:
            stopped |= token == stop_token_id
        if index + 1 == max_new_tokens or bool(stopped.all()):
            break
        mask = torch.cat([mask, mask.new_ones((rows, 1))], dim=1)
        position = position + 1
        logits = step(token, position, mask)
        if beside is not None:
            beside = beside[1](token, position, mask), beside[1]
    responses = torch.stack(tokens, dim=1)
    response_mask = response_mask_after_stop(responses, stop_token_id)
    responses = torch.where(response_mask, responses, torch.full_like(responses, pad_token_id))
    empty = responses.new_zeros((rows, 0), dtype=torch.float32)
    logprobs, reference_logprobs = (torch.stack(part, dim=1).masked_fill(~response_mask, 0.0) if part else empty
                                    for part in read)
    return Stepped(responses, response_mask, logprobs, reference_logprobs)


__all__ = ["BLOCK", "Step", "Stepped", "draw", "loop_logits", "prompts_then_steps", "sample_beside",
           "sample_responses"]
