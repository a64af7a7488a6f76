"""Sampling responses from the policy, used to measure the SFT policy's gold score at build time.

A plain loop rather than ``generate`` so temperature, seeding and EOS handling are exactly
what the task's text interface says: responses are the tokens after the prompt, cut after
the first EOS, decoded with ``skip_special_tokens=True``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase


@torch.no_grad()
def sample_responses(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    temperature: float,
    max_new_tokens: int,
    generator: torch.Generator,
) -> list[str]:
    """Sample one response per prompt at ``temperature`` (full softmax, no top-k/top-p)."""
    enc = tokenizer(prompts, padding=True, return_tensors="pt")
    input_ids, attention_mask = enc["input_ids"], enc["attention_mask"]
    start = input_ids.shape[1]
    done = torch.zeros(len(prompts), dtype=torch.bool)
    for _ in range(max_new_tokens):
        # Left padding: derive positions from the mask so each prompt starts at position 0.
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
        probs = torch.softmax(logits[:, -1].float() / temperature, dim=-1)
        nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        nxt = torch.where(done, torch.full_like(nxt, tokenizer.pad_token_id), nxt)
        input_ids = torch.cat([input_ids, nxt[:, None]], dim=1)
        attention_mask = torch.cat([attention_mask, (~done).long()[:, None]], dim=1)
        done |= nxt == tokenizer.eos_token_id
        if bool(done.all()):
            break
    rows = []
    for row in input_ids[:, start:].tolist():
        if tokenizer.eos_token_id in row:
            row = row[: row.index(tokenizer.eos_token_id) + 1]
        rows.append(row)
    return tokenizer.batch_decode(rows, skip_special_tokens=True)


@torch.no_grad()
def sample_responses_cached(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    temperature: float,
    max_new_tokens: int,
    generator: torch.Generator,
) -> list[str]:
    """:func:`sample_responses` with the model's key-value cache: each step reads one new token, not the whole
    sequence again, which on longer texts is several times faster. Same distribution, same decoding; the draws differ
    from the uncached loop's only by float rounding, so tasks whose builds are pinned keep the uncached one."""
    enc = tokenizer(prompts, padding=True, return_tensors="pt")
    attention_mask = enc["attention_mask"]
    # Left padding: derive positions from the mask so each prompt starts at position 0.
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=enc["input_ids"], attention_mask=attention_mask, position_ids=position_ids, use_cache=True,
                logits_to_keep=1)
    done = torch.zeros(len(prompts), dtype=torch.bool)
    tokens: list[torch.Tensor] = []
    for _ in range(max_new_tokens):
        probs = torch.softmax(out.logits[:, -1].float() / temperature, dim=-1)
        nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        nxt = torch.where(done, torch.full_like(nxt, tokenizer.pad_token_id), nxt)
        tokens.append(nxt)
        done |= nxt == tokenizer.eos_token_id
        if bool(done.all()):
            break
        # A finished row goes on being fed (its pads are cut below), so every row keeps one cache of one length.
        attention_mask = torch.cat([attention_mask, torch.ones_like(attention_mask[:, :1])], dim=1)
        position_ids = position_ids[:, -1:] + 1
        out = model(input_ids=nxt[:, None], attention_mask=attention_mask, position_ids=position_ids,
                    cache=out.cache, use_cache=True)
    rows = []
    for row in torch.stack(tokens, dim=1).tolist():
        if tokenizer.eos_token_id in row:
            row = row[: row.index(tokenizer.eos_token_id) + 1]
        rows.append(row)
    return tokenizer.batch_decode(rows, skip_special_tokens=True)


def mean_gold(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    gold_score: Callable[[list[str], list[str]], list[float]],
    prompts: list[str],
    samples_per_prompt: int,
    temperature: float,
    max_new_tokens: int,
    seed: int,
    cached: bool = False,
) -> dict[str, float]:
    """Mean gold score, rate of valid walks and mean response length (in words) over samples.

    Valid means a positive score: the scorer gives exactly 0.0 to invalid walks only. ``cached`` samples with
    :func:`sample_responses_cached`.
    """
    generator = torch.Generator().manual_seed(seed)
    batch = [p for p in prompts for _ in range(samples_per_prompt)]
    sample = sample_responses_cached if cached else sample_responses
    responses = sample(model, tokenizer, batch, temperature, max_new_tokens, generator)
    scores = gold_score(batch, responses)
    lengths = [len(r.split()) for r in responses]
    n = len(scores)
    return {
        "gold": sum(scores) / n,
        "valid_rate": sum(s > 0 for s in scores) / n,
        "mean_words": sum(lengths) / n,
    }
