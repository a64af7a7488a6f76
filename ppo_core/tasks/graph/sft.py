"""Supervised fine-tuning of the shortest-path task's tiny GPT-2 policy on synthetic goal-reaching random walks."""

from __future__ import annotations

import random

import torch
from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast

from ppo_core.tasks.graph.graph import Graph, goal_walk
from ppo_core.tasks.graph.params import TaskParams
from ppo_core.tasks.graph.prompts import all_trips
from ppo_core.tasks.graph.text import format_walk, make_prompt
from ppo_core.tasks.sft import encode_sft_batch, lm_loss, model_config, optimizer_step, warmup_cosine


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
