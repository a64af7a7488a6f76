"""What both tasks' supervised fine-tuning shares: a GPT-2 config of the task's shape, an SFT batch encoded with its
loss mask, the language-model loss, the warm-up and cosine schedule, and one optimiser step. Each task samples its own
texts (``tasks/graph/sft.py``, ``tasks/fortunes/sft.py``)."""

from __future__ import annotations

import math
from typing import Protocol

import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

IGNORE_INDEX = -100


class ModelShape(Protocol):
    """The GPT-2 shape a task's parameters give (the graph task's and the text task's alike)."""

    @property
    def n_positions(self) -> int: ...
    @property
    def n_embd(self) -> int: ...
    @property
    def n_layer(self) -> int: ...
    @property
    def n_head(self) -> int: ...


def model_config(params: ModelShape, tokenizer: PreTrainedTokenizerFast, width: int | None = None) -> GPT2Config:
    """The GPT-2 config shared by the policy and the reward model; ``width`` (n_embd) for a policy of its own width.

    Dropout is off: the data are clean, and PPO needs the policy's log-probs in train
    mode to match those it sampled with.
    """
    return GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=params.n_positions,
        n_embd=width or params.n_embd,
        n_layer=params.n_layer,
        n_head=params.n_head,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        summary_first_dropout=0.0,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def encode_sft_batch(
    tokenizer: PreTrainedTokenizerFast, prompts: list[str], responses: list[str]
) -> dict[str, torch.Tensor]:
    """Token ids, attention mask and labels for ``prompt response <eos>`` sequences.

    Right-padded so every sequence starts at position 0, as a prompt does at generation
    time. Only the response and its EOS are supervised; the prompt is given, not learned.
    """
    prompt_ids = tokenizer(prompts)["input_ids"]
    response_ids = tokenizer(responses, add_special_tokens=False)["input_ids"]
    rows = [p + r + [tokenizer.eos_token_id] for p, r in zip(prompt_ids, response_ids, strict=True)]
    width = max(len(row) for row in rows)
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (row, prompt) in enumerate(zip(rows, prompt_ids, strict=True)):
        input_ids[i, : len(row)] = torch.tensor(row)
        attention_mask[i, : len(row)] = 1
        labels[i, len(prompt) : len(row)] = torch.tensor(row[len(prompt) :])
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def lm_loss(model: GPT2LMHeadModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean next-token cross-entropy over the supervised positions."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return F.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]),
        batch["labels"][:, 1:].reshape(-1),
        ignore_index=IGNORE_INDEX,
    )


def warmup_cosine(step: int, total: int, warmup_frac: float = 0.05, floor: float = 0.1) -> float:
    """LR multiplier: linear warm-up, then cosine decay to ``floor``."""
    warmup = max(1, int(total * warmup_frac))
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def optimizer_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                   scheduler: torch.optim.lr_scheduler.LRScheduler, loss: torch.Tensor) -> float:
    """One step of every build's training (the SFT policies and the reward models): backward, gradients clipped to
    norm 1, the optimiser's step, then the schedule's; the loss's value, for the build's report."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    return loss.item()
