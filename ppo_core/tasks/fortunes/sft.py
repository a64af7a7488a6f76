"""Training the text task's small GPT-2 policy from scratch on the training texts.

Each text is one row, ``<bos> prompt continuation <eos>``, tokenised as the trainer will see it: the prompt as
``tokenizer(prompt)`` gives it, the continuation after it without special tokens. Every token is supervised (a
policy trained from scratch learns its English from the prompts' words too), and rows are batched by length so
that short texts are not padded to a long one's width.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast

from ppo_core.tasks.fortunes.params import TextTaskParams
from ppo_core.tasks.fortunes.prompts import TextExample
from ppo_core.tasks.sft import IGNORE_INDEX, lm_loss, model_config, optimizer_step, warmup_cosine


@dataclass(frozen=True)
class EncodedTexts:
    """Token rows of whole texts, and how many of each row's tokens are the prompt's (``<bos>`` included)."""

    rows: list[list[int]]
    prompt_lengths: list[int]


def encode_examples(tokenizer: PreTrainedTokenizerFast, examples: Sequence[TextExample],
                    max_length: int) -> EncodedTexts:
    """``<bos> prompt continuation <eos>`` per example, cut to ``max_length`` tokens (a cut row loses its EOS)."""
    prompts = tokenizer([example.prompt for example in examples])["input_ids"]
    # Truncated here only to keep the tokenizer quiet about rows longer than the model: they are cut below anyway.
    continuations = tokenizer([example.reference for example in examples], add_special_tokens=False,
                              truncation=True, max_length=max_length)["input_ids"]
    rows = [[*p, *c, tokenizer.eos_token_id][:max_length] for p, c in zip(prompts, continuations, strict=True)]
    return EncodedTexts(rows=rows, prompt_lengths=[min(len(p), max_length) for p in prompts])


def length_batches(lengths: Sequence[int], batch_size: int, rng: random.Random) -> list[list[int]]:
    """Row indices in batches of similar length, the batches in random order.

    Rows are ordered by length (ties broken at random), cut into batches, and the batches shuffled: an epoch still
    sees every row once, and a batch pads to little more than its own rows' width.
    """
    keys = [rng.random() for _ in lengths]
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], keys[i]))
    batches = [order[first : first + batch_size] for first in range(0, len(order), batch_size)]
    rng.shuffle(batches)
    return batches


def pad_rows(rows: Sequence[list[int]], pad_id: int, supervised_from: Sequence[int]) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids``, ``attention_mask`` and ``labels``, each row's labels starting at its
    ``supervised_from`` index (0: the whole row)."""
    width = max(len(row) for row in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (row, first) in enumerate(zip(rows, supervised_from, strict=True)):
        input_ids[i, : len(row)] = torch.tensor(row)
        attention_mask[i, : len(row)] = 1
        labels[i, first : len(row)] = torch.tensor(row[first:], dtype=torch.long)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def train_text_sft(tokenizer: PreTrainedTokenizerFast, encoded: EncodedTexts, params: TextTaskParams,
                   rng: random.Random) -> tuple[GPT2LMHeadModel, list[float]]:
    """Train the policy from scratch for ``sft_steps`` steps over epochs of length batches; returns the model (in
    eval mode) and its loss curve. The caller seeds torch (weight init) and passes ``rng`` (batch order)."""
    model = GPT2LMHeadModel(model_config(params, tokenizer))
    optimizer = torch.optim.AdamW(model.parameters(), lr=params.sft_lr, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: warmup_cosine(step, params.sft_steps))
    lengths = [len(row) for row in encoded.rows]
    batches: list[list[int]] = []
    model.train()
    losses = []
    for _ in range(params.sft_steps):
        if not batches:
            batches = length_batches(lengths, params.sft_batch_size, rng)
        rows = [encoded.rows[i] for i in batches.pop()]
        loss = lm_loss(model, pad_rows(rows, tokenizer.pad_token_id, [0] * len(rows)))
        losses.append(optimizer_step(model, optimizer, scheduler, loss))
    model.eval()
    return model, losses


@torch.no_grad()
def continuation_loss(model: GPT2LMHeadModel, encoded: EncodedTexts, pad_id: int, batch_size: int = 64) -> float:
    """Mean next-token cross-entropy (nats per token) over the continuations and their EOS, the prompts given: how
    well the policy predicts what it will be asked to write."""
    total, count = 0.0, 0
    for first in range(0, len(encoded.rows), batch_size):
        rows = encoded.rows[first : first + batch_size]
        batch = pad_rows(rows, pad_id, encoded.prompt_lengths[first : first + batch_size])
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        targets = batch["labels"][:, 1:].reshape(-1)
        total += F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), targets, ignore_index=IGNORE_INDEX,
                                 reduction="sum").item()
        count += int((targets != IGNORE_INDEX).sum())
    return total / max(count, 1)
