"""A Llama-family forward over new tokens with a KV cache, in few operations: what the CPU sampling copy
(``ppo_core.rollout.sampling_copy``) samples with, prompts and decode steps alike.

A decode step of a small model at a few rows is mostly fixed costs, not arithmetic: through transformers' modules a
SmolLM2-135M step (30 layers) ran about 1,650 operations, whose dispatch was most of the step outside the weights'
products. Here a layer is about 25 operations:

- the query, key and value projections as one product, and the MLP's gate and up projections as one, each from a
  weight concatenated and packed once per refresh for oneDNN (``ppo_core.models.packed_linear``);
- rotary embeddings applied to the queries and keys together;
- keys and values written in place into a float32 cache of fixed width, not concatenated onto a growing one, and
  attention over it in float32;
- the RMS norms in three operations, and one additive mask per call shared by every layer.

What it computes is the model's own forward, with the same roundings in the same dtype (``RMSNorm`` in float32,
rotary tables from the model's own rotary module) but for attention, computed in float32 from the same keys and
values: float32 logits equal the model's; bf16 sampling lies no farther from float32's than the model's own bf16
forward (``benchmarks.real_model_phases`` reads both). :func:`fused_decoder` builds one only for the module classes
it reads (:data:`SUPPORTED`); any other model samples through its own forward.
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
from ppo_core.models.sequences import position_ids_from_mask
from ppo_core.rollout.shared_prompts import distinct_rows

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
    ``apply_rotary_pos_emb`` for one tensor of heads ``states`` (..., heads, D); cos and the signed sin (..., 1, D)
    broadcast over the heads."""
    return states * cos + torch.roll(states, states.shape[-1] // 2, dims=-1) * signed_sin


class Product:
    """x W^T + b for the linear layers ``linears`` that read the same input, their weights (and biases) stacked:
    one product, from the stacked weight packed for oneDNN at about ``rows`` rows where this CPU can pack it, else
    plainly. :meth:`follow` stacks and packs again only when a layer's weight has changed since."""

    def __init__(self, linears: list[nn.Linear], rows: int) -> None:
        self.linears, self.rows = linears, rows
        self.in_features = linears[0].in_features
        self.seen: list[int] = []
        self.follow()

    def versions(self) -> list[int]:
        # A tensor's version counter moves with every in-place write, and the sampling copy's refresh writes its
        # weights in place (a weight replaced by assignment would need a new decoder).
        return [linear.weight._version for linear in self.linears] + \
            [linear.bias._version for linear in self.linears if linear.bias is not None]

    def follow(self) -> None:
        """Stack and pack the layers' weights as they are now, if they changed since the last time."""
        if self.seen == self.versions():
            return
        weight = torch.cat([linear.weight.detach() for linear in self.linears])
        biases = [linear.bias.detach() for linear in self.linears if linear.bias is not None]
        self.bias = torch.cat(biases) if biases else None
        self.packed = pack_weight(weight, self.rows)
        self.weight = weight if self.packed is None else None  # the packed layout alone, where there is one
        self.dtype = weight.dtype
        self.seen = self.versions()

    def __call__(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.packed is None:
            assert self.weight is not None
            return functional.linear(inputs, self.weight, self.bias)
        return packed_product(inputs, self.packed, self.bias)


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

    def products(self) -> tuple[Product, ...]:
        return self.qkv, self.out, self.gate_up, self.down


def attention_mask(mask: torch.Tensor, start: int) -> torch.Tensor:
    """(B, T, C) additive mask, 0 or -inf, for T new positions at columns start .. start + T - 1 of C = start + T:
    a query attends to the columns up to its own (causal) that ``mask`` (B, C; 1 attends) keeps, and always to its
    own, so that a padding position of a prompt keeps a finite output that no real position reads."""
    columns = mask.shape[1]
    own = torch.arange(start, columns, device=mask.device)[:, None]
    keys = torch.arange(columns, device=mask.device)[None, :]
    allowed = ((keys <= own) & mask.bool()[:, None, :]) | (keys == own)
    return torch.zeros(allowed.shape, dtype=torch.float32, device=mask.device).masked_fill_(~allowed, float("-inf"))


class FusedDecoder:
    """``model``'s forward over new tokens with a KV cache (:meth:`prefill` for prompts, :meth:`step` for one token
    a row) from weights joined and packed at ``rows`` rows; :meth:`refresh` after the model's weights change. Built by
    :func:`fused_decoder`."""

    def __init__(self, model: PreTrainedModel, rows: int) -> None:
        self.model, self.rows = model, rows
        config = model.config
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        attention = model.model.layers[0].self_attn
        self.head_dim, self.scaling = attention.head_dim, attention.scaling
        self.eps = model.model.norm.variance_epsilon
        self.layers = []
        for layer in model.model.layers:
            attention, mlp = layer.self_attn, layer.mlp
            self.layers.append(Layer(
                norm_in=layer.input_layernorm.weight.detach(), norm_post=layer.post_attention_layernorm.weight.detach(),
                qkv=Product([attention.q_proj, attention.k_proj, attention.v_proj], rows),
                out=Product([attention.o_proj], rows),
                gate_up=Product([mlp.gate_proj, mlp.up_proj], rows),
                down=Product([mlp.down_proj], rows)))
        self.head = Product([cast(nn.Linear, model.get_output_embeddings())], rows)

    def products(self) -> list[Product]:
        """Every product of a forward, in its order: each layer's four, then the head."""
        return [product for layer in self.layers for product in layer.products()] + [self.head]

    def refresh(self) -> None:
        """Join and pack again the weights that changed (a LoRA policy's refresh leaves the head alone)."""
        for product in self.products():
            product.follow()

    def new_cache(self, rows: int, width: int) -> list[Kept]:
        """Per layer a float32 cache of ``rows`` rows and ``width`` columns: keys transposed, (B H_kv, D, width),
        values (B H_kv, width, D).

        Float32, because a CPU's bf16 batched products of these small shapes ran slower than float32's; the model's
        keys and values widen exactly. The keys transposed, because the scores' product then reads each key/value
        head's keys as plain rows, which ran faster from memory (where they are after a layer's weights have
        streamed through the caches) than transposing them in the product."""
        heads, dim = self.kv_heads, self.head_dim
        return [Kept(torch.zeros((rows * heads, dim, width)), torch.zeros((rows * heads, width, dim)))
                for _ in self.layers]

    def prefill(self, queries: torch.Tensor, query_mask: torch.Tensor, width: int) -> tuple[list[Kept], torch.Tensor]:
        """Left-padded prompts through the model: a cache ``width`` columns wide holding them in its first L, and the
        logits [B, V] that predict each row's first new token. A prompt several rows share runs once
        (``ppo_core.rollout.shared_prompts.distinct_rows``) and its cache is copied out to them."""
        first, inverse = distinct_rows(queries, query_mask)
        mask = query_mask.long()[first]
        cache = self.new_cache(len(first), width)
        logits = self.forward(queries[first], position_ids_from_mask(mask), mask, cache, 0)
        return [kept_rows(kept, inverse, self.kv_heads) for kept in cache], logits[inverse]

    def step(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: list[Kept],
             column: int) -> torch.Tensor:
        """The logits [B, V] after one new token per row: ``tokens`` [B], ``positions`` [B, 1] their position ids,
        ``mask`` [B, column + 1] (1 attends, 0 is padding) over the cache's first ``column`` columns and the new
        token, whose key and value are written into column ``column`` of ``cache``."""
        return self.forward(tokens[:, None], positions, mask, cache, column)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: list[Kept],
                start: int) -> torch.Tensor:
        """The logits [B, V] of the last of T new tokens a row: ``tokens`` and ``positions`` [B, T], ``mask``
        [B, start + T] over the cache's first ``start`` columns and the new tokens, whose keys and values are
        written into columns ``start`` .. ``start + T - 1`` of ``cache``."""
        (rows, new), group, dim = tokens.shape, self.heads // self.kv_heads, self.head_dim
        heads, kv_heads, end = self.heads, self.kv_heads, start + tokens.shape[1]
        hidden = self.model.get_input_embeddings()(tokens).reshape(rows * new, -1)
        cos, sin = self.model.model.rotary_emb(hidden, positions)  # (B, T, D) each, in the hidden states' dtype
        sin = torch.cat([-sin[..., :dim // 2], sin[..., dim // 2:]], dim=-1)  # rotate_half's signs, once a call
        cos, sin = cos[:, :, None, :], sin[:, :, None, :]
        additive = attention_mask(mask, start)[:, None, None].expand(rows, kv_heads, group, new, end)
        additive = additive.reshape(rows * kv_heads, group * new, end)
        rotated_heads = heads + kv_heads
        for layer, kept in zip(self.layers, cache, strict=True):
            qkv = layer.qkv(rms_norm(hidden, layer.norm_in, self.eps)).view(rows, new, rotated_heads + kv_heads, dim)
            rotated = rotate(qkv[:, :, :rotated_heads], cos, sin)
            # (B, T, H_kv, D) -> keys (B H_kv, D, T) and values (B H_kv, T, D)
            kept.keys[:, :, start:end] = rotated[:, :, heads:].permute(0, 2, 3, 1).reshape(rows * kv_heads, dim, new)
            kept.values[:, start:end] = qkv[:, :, rotated_heads:].transpose(1, 2).reshape(rows * kv_heads, new, dim)
            queries = rotated[:, :, :heads].reshape(rows, new, kv_heads, group, dim).permute(0, 2, 3, 1, 4)
            attended = attend(queries.reshape(rows * kv_heads, group * new, dim), kept.keys[:, :, :end],
                              kept.values[:, :end], additive, self.scaling)
            attended = attended.view(rows, kv_heads, group, new, dim).permute(0, 3, 1, 2, 4)
            hidden = hidden + layer.out(attended.reshape(rows * new, heads * dim).to(hidden.dtype))
            gate_up = layer.gate_up(rms_norm(hidden, layer.norm_post, self.eps))
            width = gate_up.shape[-1] // 2
            hidden = hidden + layer.down(functional.silu(gate_up[:, :width]) * gate_up[:, width:])
        last = hidden.view(rows, new, -1)[:, -1]
        return self.head(rms_norm(last, self.model.model.norm.weight, self.eps))


def kept_rows(kept: Kept, rows: torch.Tensor, heads: int) -> Kept:
    """The cache of prompts (P H_kv, ...) copied out to B rows, row b holding prompt ``rows[b]``'s."""
    keys = kept.keys.unflatten(0, (-1, heads))[rows].flatten(0, 1)
    return Kept(keys, kept.values.unflatten(0, (-1, heads))[rows].flatten(0, 1))


def attend(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, additive: torch.Tensor,
           scaling: float) -> torch.Tensor:
    """softmax(s Q K^T + m) V for each key/value head's group of query heads, in float32: ``queries`` (B H_kv,
    G, D), ``keys`` transposed (B H_kv, D, L), ``values`` (B H_kv, L, D), ``additive`` (B H_kv, G, L) the mask
    (0 or -inf)."""
    scores = torch.baddbmm(additive, queries.float(), keys, alpha=scaling)
    return torch.bmm(scores.softmax(dim=-1), values)


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
