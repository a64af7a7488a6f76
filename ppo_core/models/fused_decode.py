"""A Llama-family decode step in few operations, for the CPU sampling copy (``ppo_core.rollout.sampling_copy``).

A decode step of a small model at a few rows is mostly overhead, not arithmetic. Through transformers' modules a
SmolLM2-135M step (30 layers, 8 rows, bf16, one thread, an AMD EPYC with AVX-512 BF16) ran about 1,650 operations,
and a model of the same shape with tiny weights still took 10.7 ms a step against 28.9 ms with the real ones: the
weights' products were half the step. Here one step is the same arithmetic in about 25 operations a layer:

- the query, key and value projections as one product, and the MLP's gate and up projections as one, each from a
  weight concatenated and packed once for oneDNN (``ppo_core.models.packed_linear``); wider products also read
  their weights closer to the memory's rate than three or two narrow ones;
- rotary embeddings applied to the queries and keys together;
- keys and values written in place into a cache of fixed width, not concatenated onto a growing one;
- the RMS norms in three operations, and one additive mask per step shared by every layer.

What it computes is the model's own forward for one new token, with the same roundings in the same dtype
(``RMSNorm`` in float32, rotary tables from the model's own rotary module, scores normalised in float32 as
``ppo_core.models.decode_attention``'s), up to the order of a product's sums. :func:`fused_decoder` builds one only
for the module classes it reads (:data:`SUPPORTED`); any other model decodes through its own forward.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import cast

import torch
from torch import nn
from torch.nn import functional
from transformers import PreTrainedModel
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaMLP, LlamaRMSNorm
from transformers.models.qwen2.modeling_qwen2 import Qwen2Attention, Qwen2MLP, Qwen2RMSNorm

from ppo_core.models.packed_linear import pack_weight, packed_product

SUPPORTED = {"llama": (LlamaAttention, LlamaMLP, LlamaRMSNorm), "qwen2": (Qwen2Attention, Qwen2MLP, Qwen2RMSNorm)}
"""The model types decoded here, with the exact module classes their layers must have: a subclass or another
model's attention (query/key norms, sliding windows, biases on the output) computes something else."""


def rms_norm(hidden: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """w * round(x / sqrt(mean(x^2) + eps)): the norm in float32, rounded to x's dtype before the weight multiplies
    it, as transformers' Llama and Qwen2 RMSNorm compute it."""
    normed = functional.rms_norm(hidden.float(), (hidden.shape[-1],), eps=eps)
    return weight * normed.to(hidden.dtype)


def rotate(states: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """x cos + rotate_half(x) sin, with rotate_half(x) = (-x2, x1) for the halves x1, x2 of the last dimension,
    computed as x cos + roll(x) (-s1, s2): the same products, since negating is exact. transformers'
    ``apply_rotary_pos_emb`` for one tensor of heads ``states`` (B, heads, D); cos and the signed sin (B, 1, D)."""
    return states * cos + torch.roll(states, states.shape[-1] // 2, dims=-1) * signed_sin


class Product:
    """x W^T + b, from W packed for oneDNN at about ``rows`` rows where this CPU can pack it, else plainly."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, rows: int) -> None:
        self.weight, self.bias = weight, bias
        self.packed = pack_weight(weight, rows)

    def __call__(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.packed is None:
            return functional.linear(inputs, self.weight, self.bias)
        return packed_product(inputs, self.packed, self.bias)


def joined(linears: list[nn.Linear], rows: int) -> Product:
    """One product for several linear layers that read the same input: their weights (and biases) stacked."""
    weight = torch.cat([linear.weight.detach() for linear in linears])
    biases = [linear.bias for linear in linears]
    bias = None if biases[0] is None else torch.cat([b.detach() for b in biases if b is not None])
    return Product(weight, bias, rows)


@dataclass(frozen=True)
class Kept:
    """One layer's KV cache: keys transposed, (B H_kv, D, width), and values, (B H_kv, width, D)."""

    keys: torch.Tensor
    values: torch.Tensor


@dataclass
class Layer:
    """One decoder layer's weights, joined and packed."""

    norm_in: torch.Tensor
    norm_post: torch.Tensor
    qkv: Product
    out: Product
    gate_up: Product
    down: Product


class FusedDecoder:
    """``model``'s decode step (:meth:`step`) from weights joined and packed at ``rows`` rows; :meth:`refresh` after
    the model's weights change. Built by :func:`fused_decoder`."""

    def __init__(self, model: PreTrainedModel, rows: int) -> None:
        self.model, self.rows = model, rows
        config = model.config
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        attention = model.model.layers[0].self_attn
        self.head_dim, self.scaling = attention.head_dim, attention.scaling
        self.eps = model.model.norm.variance_epsilon
        self.refresh()

    def refresh(self) -> None:
        """Join and pack the model's weights as they are now."""
        self.layers = []
        for layer in self.model.model.layers:
            attention, mlp = layer.self_attn, layer.mlp
            self.layers.append(Layer(
                norm_in=layer.input_layernorm.weight.detach(), norm_post=layer.post_attention_layernorm.weight.detach(),
                qkv=joined([plain(attention.q_proj), plain(attention.k_proj), plain(attention.v_proj)], self.rows),
                out=joined([plain(attention.o_proj)], self.rows),
                gate_up=joined([plain(mlp.gate_proj), plain(mlp.up_proj)], self.rows),
                down=joined([plain(mlp.down_proj)], self.rows)))
        self.head = joined([plain(self.model.get_output_embeddings())], self.rows)

    def new_cache(self, layers: list[tuple[torch.Tensor, torch.Tensor]], rows: torch.Tensor,
                  width: int) -> list[Kept]:
        """Per layer the float32 keys, transposed to (B H_kv, D, width), and values, (B H_kv, width, D): in their
        first L columns the prompts' ``layers`` (each (P, H_kv, L, D), P prompts) at ``rows`` (B indices into P).

        Float32, because a CPU's bf16 batched products of these shapes took 2-3x float32's time; the model's keys
        and values widen exactly. The keys transposed, because the scores' product then reads each key/value head's
        keys as plain rows: read from memory, as after a layer's weights have streamed through the caches, the
        product took 43 us instead of 76 (24 heads, 50 positions, one thread, an AMD EPYC with AVX-512 BF16)."""
        cache = []
        for keys, values in layers:
            _, heads, length, dim = keys.shape
            kept = Kept(torch.zeros((len(rows) * heads, dim, width), dtype=torch.float32, device=keys.device),
                        torch.zeros((len(rows) * heads, width, dim), dtype=torch.float32, device=keys.device))
            kept.keys[:, :, :length] = keys[rows].reshape(-1, length, dim).transpose(1, 2)
            kept.values[:, :length] = values[rows].reshape(-1, length, dim)
            cache.append(kept)
        return cache

    def step(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: list[Kept],
             column: int) -> torch.Tensor:
        """The logits [B, V] after one new token per row: ``tokens`` [B], ``positions`` [B, 1] their position ids,
        ``mask`` [B, column + 1] (1 attends, 0 is padding) over the cache's first ``column`` columns and the new
        token, whose key and value are written into column ``column`` of ``cache`` (:meth:`new_cache`)."""
        rows, group, dim = tokens.shape[0], self.heads // self.kv_heads, self.head_dim
        hidden = self.model.get_input_embeddings()(tokens)
        cos, sin = self.model.model.rotary_emb(hidden, positions)  # (B, 1, D) each, in the hidden states' dtype
        sin = torch.cat([-sin[..., :dim // 2], sin[..., dim // 2:]], dim=-1)  # rotate_half's signs, once a step
        additive = torch.zeros(mask.shape, dtype=torch.float32).masked_fill_(mask == 0, float("-inf"))
        additive = additive[:, None, None, :].expand(rows, self.kv_heads, group, column + 1)
        additive = additive.reshape(rows * self.kv_heads, group, column + 1)
        rotated_heads = self.heads + self.kv_heads
        for layer, kept in zip(self.layers, cache, strict=True):
            qkv = layer.qkv(rms_norm(hidden, layer.norm_in, self.eps))
            rotated = rotate(qkv[:, :rotated_heads * dim].view(rows, rotated_heads, dim), cos, sin)
            kept.keys[:, :, column] = rotated[:, self.heads:].reshape(rows * self.kv_heads, dim)
            kept.values[:, column] = qkv[:, rotated_heads * dim:].reshape(rows * self.kv_heads, dim)
            attended = attend(rotated[:, :self.heads].reshape(rows * self.kv_heads, group, dim),
                              kept.keys[:, :, :column + 1], kept.values[:, :column + 1], additive, self.scaling)
            hidden = hidden + layer.out(attended.view(rows, -1).to(hidden.dtype))
            gate_up = layer.gate_up(rms_norm(hidden, layer.norm_post, self.eps))
            width = gate_up.shape[-1] // 2
            hidden = hidden + layer.down(functional.silu(gate_up[:, :width]) * gate_up[:, width:])
        return self.head(rms_norm(hidden, self.model.model.norm.weight, self.eps))


def attend(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, additive: torch.Tensor,
           scaling: float) -> torch.Tensor:
    """softmax(s Q K^T + m) V for each key/value head's group of query heads, in float32: ``queries`` (B H_kv,
    G, D), ``keys`` transposed (B H_kv, D, L), ``values`` (B H_kv, L, D), ``additive`` (B H_kv, G, L) the mask
    (0 or -inf)."""
    scores = torch.baddbmm(additive, queries.float(), keys, alpha=scaling)
    return torch.bmm(scores.softmax(dim=-1), values)


def plain(layer: nn.Module) -> nn.Linear:
    """The ``nn.Linear`` behind a layer, packed (``ppo_core.models.packed_linear.PackedLinear``) or not."""
    return cast(nn.Linear, getattr(layer, "linear", layer))


def decodable(model: PreTrainedModel) -> bool:
    """Whether :class:`FusedDecoder` computes ``model``'s forward: a supported model type whose every layer has
    exactly the classes it reads, SiLU gating, and no sliding window in use."""
    config = model.config
    classes = SUPPORTED.get(config.model_type)
    if classes is None or config.hidden_act != "silu" or getattr(config, "use_sliding_window", False):
        return False
    attention_class, mlp_class, norm_class = classes
    body = getattr(model, "model", None)
    if body is None or type(getattr(body, "norm", None)) is not norm_class:
        return False
    return all(type(layer.self_attn) is attention_class and type(layer.mlp) is mlp_class
               and type(layer.input_layernorm) is norm_class and type(layer.post_attention_layernorm) is norm_class
               for layer in body.layers)


_DECODERS: weakref.WeakKeyDictionary[PreTrainedModel, FusedDecoder] = weakref.WeakKeyDictionary()


def fused_decoder(model: PreTrainedModel, rows: int) -> FusedDecoder | None:
    """A :class:`FusedDecoder` of ``model`` (frozen, on a CPU), kept for :func:`decoder_of`; None, and nothing
    kept, where :func:`decodable` is not."""
    if not decodable(model):
        return None
    decoder = _DECODERS[model] = FusedDecoder(model, rows)
    return decoder


def decoder_of(model: PreTrainedModel) -> FusedDecoder | None:
    """The decoder :func:`fused_decoder` built for ``model``, if any: what the CPU sampling loop decodes with."""
    return _DECODERS.get(model)


__all__ = ["SUPPORTED", "FusedDecoder", "Kept", "attend", "decodable", "decoder_of", "fused_decoder", "rms_norm",
           "rotate"]
