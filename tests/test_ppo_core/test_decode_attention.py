"""ppo_core.models.decode_attention, the sampling copy's attention for one query position: the grouped products equal
a head-by-head reference; a model switched to it decodes what SDPA decodes, on every architecture the sampling paths
serve; a model whose attention is not SDPA's is left alone."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
from helpers.tiny_architectures import WRITERS, load_left_padded
from transformers import AutoModelForCausalLM

from ppo_core.models.decode_attention import NAME, grouped_decode_attention, use_decode_attention
from ppo_core.rollout.sampling_copy import SamplingCopy
from ppo_core.rollout.shared_prompts import cache_keyword
from tools import tiny_models


def _head_by_head(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
                  scaling: float) -> torch.Tensor:
    """The slow reference: for each row b and query head h, with g = h // (H / H_kv),
    softmax(s q k_j + m_j over positions j) weighting v_j, summed one position at a time in float64."""
    batch, heads, _, dim = query.shape
    group = heads // key.shape[1]
    out = torch.zeros(batch, 1, heads, dim, dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            g = h // group
            scores = []
            for j in range(key.shape[2]):
                score = scaling * float(query[b, h, 0].double() @ key[b, g, j].double())
                if mask is not None and mask.dtype == torch.bool:
                    score = score if bool(mask[b, 0, 0, j]) else -math.inf
                elif mask is not None:
                    score += float(mask[b, 0, 0, j])
                scores.append(score)
            top = max(scores)
            weights = [math.exp(s - top) for s in scores]
            total = sum(weights)
            for j, w in enumerate(weights):
                out[b, 0, h] += (w / total) * value[b, g, j].double()
    return out


@pytest.mark.parametrize(("heads", "kv_heads"), [(6, 2), (4, 4), (3, 1)])
@pytest.mark.parametrize("mask_kind", ["none", "bool", "additive"])
def test_grouped_products_equal_the_head_by_head_reference(heads: int, kv_heads: int, mask_kind: str) -> None:
    generator = torch.Generator().manual_seed(heads * 10 + kv_heads)
    batch, positions, dim = 3, 7, 8
    query = torch.randn(batch, heads, 1, dim, generator=generator)
    key = torch.randn(batch, kv_heads, positions, dim, generator=generator)
    value = torch.randn(batch, kv_heads, positions, dim, generator=generator)
    mask: torch.Tensor | None = None
    if mask_kind == "bool":  # left padding: row 0 skips its first 3 positions
        mask = torch.ones(batch, 1, 1, positions, dtype=torch.bool)
        mask[0, ..., :3] = False
    elif mask_kind == "additive":
        mask = torch.randn(batch, 1, 1, positions, generator=generator)
    ours = grouped_decode_attention(query, key, value, mask, dim ** -0.5)
    assert ours.shape == (batch, 1, heads, dim)
    torch.testing.assert_close(ours.double(), _head_by_head(query, key, value, mask, dim ** -0.5),
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("architecture", sorted(WRITERS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_switched_model_decodes_what_sdpa_decodes(architecture: str, dtype: torch.dtype, tmp_path: Path) -> None:
    # Left-padded prompts of different lengths, then 5 steps fed one token at a time through the cache.
    model, tokenizer = load_left_padded(architecture, tmp_path)
    for parameter in model.parameters():  # the weights only, as the sampling copy rounds them
        parameter.data = parameter.data.to(dtype)
    switched = copy.deepcopy(model)
    assert use_decode_attention(switched)
    assert switched.config._attn_implementation == NAME and model.config._attn_implementation == "sdpa"
    encoded = tokenizer(["hello there", "a", "the quick brown fox jumps"], return_tensors="pt", padding=True)
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    tolerance = 1e-4 if dtype == torch.float32 else 3e-2
    with torch.no_grad():
        sdpa_out = model(input_ids=ids, attention_mask=mask, use_cache=True)
        ours_out = switched(input_ids=ids, attention_mask=mask, use_cache=True)
        torch.testing.assert_close(ours_out.logits, sdpa_out.logits)  # a prefill is SDPA's on both sides
        keyword = cache_keyword(model)
        sdpa_cache, ours_cache = {keyword: sdpa_out.past_key_values}, {keyword: ours_out.past_key_values}
        position = (mask.long().cumsum(-1) - 1).clamp_min(0)[:, -1:]
        token = sdpa_out.logits[:, -1].argmax(-1, keepdim=True)
        for _ in range(5):
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
            position = position + 1
            theirs = model(input_ids=token, attention_mask=mask, position_ids=position, use_cache=True, **sdpa_cache)
            ours = switched(input_ids=token, attention_mask=mask, position_ids=position, use_cache=True, **ours_cache)
            scale = theirs.logits.float().abs().max()
            assert float((ours.logits.float() - theirs.logits.float()).abs().max()) <= tolerance * max(1.0, scale)
            token = theirs.logits[:, -1].argmax(-1, keepdim=True)


def test_a_model_whose_attention_is_not_sdpas_is_left_alone(tmp_path: Path) -> None:
    path = tiny_models.write_llama(tmp_path / "model", seed=1)
    eager = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager")
    assert not use_decode_attention(eager)
    assert eager.config._attn_implementation == "eager"


def test_the_sampling_copy_decodes_with_it_and_the_policy_keeps_sdpa(tmp_path: Path) -> None:
    policy, _ = load_left_padded("llama", tmp_path)
    sampling = SamplingCopy(policy, torch.bfloat16, rows=4)
    assert sampling.decode_attention and sampling.model.config._attn_implementation == NAME
    assert policy.config._attn_implementation == "sdpa"
