"""The bytes a run's tensors take on one device, as pure formulas of a model's shape and a batch's size: the
weights with their gradients and optimizer moments, the activations kept for the backward pass, the logits, and
generation's key/value cache. :mod:`ppo_core.memory.estimate` applies them to a run's models and tokens; each is
tested against the bytes a real tensor of that size holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PretrainedConfig

TRAINABLE_BYTES = 16  # per trained parameter: float32 weight 4 + gradient 4 + AdamW's two float32 moments 8
LAYER_BYTES = 34  # per token per hidden unit per layer at 16 bits (Korthikanti et al. 2022, no tensor parallelism)
SCORE_BYTES = 5  # per attention score per head at 16 bits: QK^T 2, softmax 2, dropout mask 1 (eager attention only)
GIB = 2**30


@dataclass(frozen=True)
class Shape:
    """What the activation and KV-cache formulas read from a model's config."""

    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int  # fewer than num_heads under grouped-query attention
    head_dim: int
    vocab_size: int

    @classmethod
    def from_config(cls, model_config: PretrainedConfig) -> Shape:
        text = model_config.get_text_config()  # a multimodal checkpoint's language model
        heads = int(text.num_attention_heads)
        return cls(
            num_layers=int(text.num_hidden_layers), hidden_size=int(text.hidden_size), num_heads=heads,
            num_kv_heads=int(getattr(text, "num_key_value_heads", None) or heads),
            head_dim=int(getattr(text, "head_dim", None) or text.hidden_size // heads),
            vocab_size=int(text.vocab_size),
        )


def weight_bytes(trainable: int, frozen: int, frozen_dtype: str) -> int:
    """M = 16·N_trained + itemsize(dtype)·N_frozen: float32 weights, gradients and AdamW's two moments for what
    trains; the weights alone for what does not."""
    return TRAINABLE_BYTES * trainable + dtype_itemsize(frozen_dtype) * frozen


def layer_activation_bytes(shape: Shape, sequence: int, rows: int, itemsize: int, attention_scores: bool) -> int:
    """One transformer layer's activations kept for the backward pass (Korthikanti et al. 2022, "Reducing Activation
    Recomputation in Large Transformer Models", eq. 1 without tensor parallelism):

        A = s·b·h·(34 + 5·a·s/h) bytes at 16 bits, times itemsize/2 at other widths.

    The 5·a·s/h term is the s×s attention scores, softmax and dropout mask of each head, stored by eager attention
    only: sdpa and flash-attention kernels (transformers' default) keep O(s) per head instead. The 34 assumes a 4h MLP
    with dropout; PPO runs without dropout and Llama-style gated MLPs are about 2.7h wide, so it errs high.
    """
    per_token = LAYER_BYTES * shape.hidden_size + (SCORE_BYTES * shape.num_heads * sequence if attention_scores else 0)
    return sequence * rows * per_token * itemsize // 2


def trunk_activation_bytes(shape: Shape, sequence: int, rows: int, itemsize: int, attention_scores: bool,
                           checkpointing: bool) -> int:
    """L·A for the whole trunk; with gradient checkpointing, L·s·b·h·itemsize (each layer's input) + A (the layer
    being recomputed). The same for a LoRA trunk, which makes it an upper bound there (frozen linears need not keep
    their inputs)."""
    layer = layer_activation_bytes(shape, sequence, rows, itemsize, attention_scores)
    if checkpointing:
        return shape.num_layers * sequence * rows * shape.hidden_size * itemsize + layer
    return shape.num_layers * layer


def update_logits_bytes(rows: int, response_length: int, vocab_size: int) -> int:
    """2·b·(R+1)·V·4: the float32 logits of the last R+1 positions and their log-softmax, kept for the backward."""
    return 2 * rows * (response_length + 1) * vocab_size * 4


def rollout_logits_bytes(rows: int, response_length: int, vocab_size: int, itemsize: int) -> int:
    """b·(R+1)·V·(itemsize + 8): one model's logits, then their float32 temperature-scaled copy and its
    log-softmax (no gradient); the rollout reduces each model's logits to log-probabilities before the next."""
    return rows * (response_length + 1) * vocab_size * (itemsize + 8)


def kv_cache_bytes(shape: Shape, sequence: int, rows: int, itemsize: int) -> int:
    """2·L·kv_heads·head_dim·s·b·itemsize: a key and a value per layer, KV head and position."""
    return 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * sequence * rows * itemsize


def dtype_itemsize(name: str) -> int:
    return int(getattr(torch, name).itemsize)
