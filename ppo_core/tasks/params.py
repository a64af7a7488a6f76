"""What both built-in tasks' builds read alike: the seed, the GPT-2 shape of the policy and the reward model, the SFT
run and the reward model's Bradley-Terry training. Each task's parameters add their own fields
(:class:`ppo_core.tasks.graph.params.TaskParams`, :class:`ppo_core.tasks.fortunes.params.TextTaskParams`) and hash
them all into their cache key, by name, so where a field is declared does not change a key."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TrainingParams:
    """The fields every built-in task's build shares."""

    seed: int
    """Seeds every random choice of the build: the data, the weights, the batches and the reward model's pairs."""
    n_layer: int
    """GPT-2 blocks, shared by the policy and the reward model."""
    n_embd: int
    """GPT-2 width."""
    n_head: int
    """GPT-2 attention heads."""
    n_positions: int
    """Longest sequence in tokens; a longer training text is cut to it (and loses its EOS)."""
    sft_steps: int
    """Optimiser steps of the policy's supervised training."""
    sft_batch_size: int
    """Sequences (walks, or texts) per SFT step."""
    sft_lr: float
    """Peak SFT learning rate (warm-up, then cosine decay)."""
    rm_train_pairs: int
    """Gold-labelled preference pairs the proxy reward model is trained on."""
    rm_heldout_pairs: int
    """Held-out pairs (the text task's from other training prompts) the reward model's accuracy is measured on."""
    rm_epochs: int
    """Passes of Bradley-Terry training over the pairs."""
    rm_batch_size: int
    """Pairs per reward-model step."""
    rm_lr: float
    """Peak reward-model learning rate."""
