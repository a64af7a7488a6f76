"""Supervised fine-tuning of the tiny GPT-2 policy on synthetic goal-reaching random walks."""

from __future__ import annotations

import math
import random
from typing import Protocol

import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from ppo_core.tasks.graph.graph import Graph, goal_walk
from ppo_core.tasks.graph.params import TaskParams
from ppo_core.tasks.graph.prompts import all_trips
from ppo_core.tasks.graph.text import format_walk, make_prompt

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


def sample_sft_batch(graph: Graph, params: TaskParams, rng: random.Random) -> tuple[list[str], list[str]]:
    """A fresh batch of (prompt, walk) examples over all trips (the data are unlimited)."""
    trips = all_trips(graph)
    prompts, responses = [], []
    for _ in range(params.sft_batch_size):
        start, goal = rng.choice(trips)
        walk = goal_walk(graph, start, goal, rng, params.greedy_prob, params.max_walk_len)
        prompts.append(make_prompt(start, goal))
        responses.append(format_walk(walk))
    return prompts, responses


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


def train_sft(
    graph: Graph, tokenizer: PreTrainedTokenizerFast, params: TaskParams, rng: random.Random, width: int | None = None
) -> tuple[GPT2LMHeadModel, list[float]]:
    """Train the policy from scratch (``width``: an n_embd other than the task's); returns the model (in eval mode)
    and its loss curve.

    The caller seeds torch (weight init) and passes ``rng`` (data), so the result is a
    function of ``params``.
    """
    model = GPT2LMHeadModel(model_config(params, tokenizer, width))
    optimizer = torch.optim.AdamW(model.parameters(), lr=params.sft_lr, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: warmup_cosine(step, params.sft_steps))
    model.train()
    losses = []
    for _ in range(params.sft_steps):
        batch = encode_sft_batch(tokenizer, *sample_sft_batch(graph, params, rng))
        loss = lm_loss(model, batch)
        losses.append(optimizer_step(model, optimizer, scheduler, loss))
    model.eval()
    return model, losses
