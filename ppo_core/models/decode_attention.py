"""Attention for the CPU sampling copy's decode steps: one query position, its heads grouped over the key/value heads
(GQA) and read as two products and a softmax per key/value head, in place of SDPA's CPU flash kernel.

With no padding to mask (every row's prompt of one length: a GRPO rollout whose rows are one prompt's group),
transformers hands a decode step's grouped heads to SDPA with ``enable_gqa``. In bf16 the CPU's flash kernel then
took about 6x as long as the two products (SmolLM2-135M's 9 query heads over 3 key/value heads, 8 rows, about 50
positions, one thread, an AMD EPYC with AVX-512 BF16: the figures are on
``benchmarks/results/real_model_phases/README.md``). With padding, transformers folds the grouped heads into the
query itself and SDPA's kernel is about as fast as the products. Every other call, a prompt's prefill among them,
and any call with an argument the products do not read (dropout, soft-capping, attention sinks, a position bias),
goes to transformers' own SDPA attention; the masks are SDPA's (:data:`NAME` is registered with ``sdpa_mask``), so
both read the same mask.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "ppo_tune_cpu_decode"
UNREAD = ("softcap", "s_aux", "sinks", "position_bias")
"""Keyword arguments that change what attention computes; a call that sets one goes to SDPA."""


def grouped_decode_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             mask: torch.Tensor | None, scaling: float) -> torch.Tensor:
    """softmax(s q_h K_g^T + m) V_g for each query head h of one position, g = h // (H / H_kv) its key/value head:
    ``query`` (B, H, 1, D), ``key`` and ``value`` (B, H_kv, L, D), ``mask`` None or (B, 1, 1, L), boolean (True
    attends) or additive. Returns (B, 1, H, D), as transformers' attention functions do. The scores are formed in the
    inputs' dtype and normalised in float32."""
    batch, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, dim)  # head h = g * group + j
    scores = torch.matmul(grouped, key.transpose(-1, -2)).float() * scaling
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    weights = scores.softmax(dim=-1).to(value.dtype)
    return torch.matmul(weights, value).reshape(batch, 1, heads, dim)


def decode_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                     **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention interface: :func:`grouped_decode_attention` for one query position, else SDPA."""
    if query.shape[2] != 1 or dropout or any(kwargs.get(name) is not None for name in UNREAD) \
            or query.shape[1] % key.shape[1]:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    return grouped_decode_attention(query, key, value, attention_mask, scale), None


def use_decode_attention(model: PreTrainedModel) -> bool:
    """Switch ``model`` (an SDPA model) to :func:`decode_attention`; False, leaving it as it was, where its attention
    is not SDPA's (eager, flash or flex: what they compute differs, or they need what SDPA does not)."""
    if model.config._attn_implementation != "sdpa":
        return False
    AttentionInterface.register(NAME, decode_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    model.set_attn_implementation(NAME)
    return True


__all__ = ["NAME", "decode_attention", "grouped_decode_attention", "use_decode_attention"]
