"""The gradients of one update's first optimizer step, to compare two ways of computing the same update."""

from __future__ import annotations

from typing import Any

import torch

from ppo_core import PPOConfig, PPOTrainer


def first_step_gradients(values: dict[str, Any]) -> tuple[list[list[torch.Tensor]], dict[str, float], list[int]]:
    """Every trained parameter's gradient at the first optimizer step of one update, by optimizer; that update's
    metrics; and the rows of each policy forward that built a graph (the update's)."""
    trainer = PPOTrainer(PPOConfig(**values))
    forwards: list[int] = []
    trainer.optimisation.policy.register_forward_pre_hook(
        lambda _, args, kwargs: forwards.append(kwargs["input_ids"].shape[0]) if torch.is_grad_enabled() else None,
        with_kwargs=True)
    seen: dict[int, list[torch.Tensor]] = {}  # by optimizer (the policy's, the value network's): its first step

    def record(optimizer: torch.optim.Optimizer, *_: Any) -> None:
        seen.setdefault(id(optimizer), [p.grad.detach().clone() for group in optimizer.param_groups
                                        for p in group["params"] if p.grad is not None])

    # accelerate wraps each optimizer; the hook goes on the torch optimizer inside.
    inner = [getattr(optimizer, "optimizer", optimizer) for optimizer in trainer.optimisation.optimizers]
    for optimizer in inner:
        optimizer.register_step_pre_hook(record)
    metrics = trainer.step(1)
    return [seen[id(optimizer)] for optimizer in inner], metrics, forwards
