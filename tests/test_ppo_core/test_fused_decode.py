"""ppo_core.rollout.fused_decode, the sampling copy's decode step in few operations: its pieces equal transformers'
own functions or a slow reference; its logits are the model's forward's (float32) or as close to float32's as the
model's own bf16 forward (bf16), on Llama and Qwen2 with left padding and shared prompts, grouped heads included; it
follows the policy after a refresh; other architectures and modified layers decode through the model's forward."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import cast

import pytest
import torch
from helpers.tiny_architectures import load_left_padded
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRMSNorm, apply_rotary_pos_emb

from ppo_core import PPOConfig
from ppo_core.rollout.fused_decode import attend, attention_mask, decodable, decoder_of, rms_norm, rotate
from ppo_core.rollout.sampling_copy import SamplingCopy, sampling_copy
from ppo_core.rollout.sampling_loop import loop_logits, sample_responses


def _grouped_llama(seed: int = 3) -> PreTrainedModel:
    """A random Llama with 6 query heads over 2 key/value heads, so groups are neither 1 nor all heads."""
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=3,
                         num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(config).eval()
    assert model.config._attn_implementation == "sdpa"  # as the sampling copy's models load
    return model


def _models(tmp_path: Path) -> dict[str, PreTrainedModel]:
    return {"grouped_llama": _grouped_llama(), "llama": load_left_padded("llama", tmp_path / "l")[0],
            "qwen2": load_left_padded("qwen2", tmp_path / "q")[0]}


PROMPTS = torch.tensor([[0, 0, 0, 5, 9, 13], [3, 3, 8, 21, 11, 4], [0, 0, 0, 5, 9, 13], [0, 7, 2, 2, 30, 6]])
PROMPT_MASK = (torch.arange(6) >= torch.tensor([[3], [0], [3], [1]])).long()  # left padding; rows 0 and 2 share
FED = torch.tensor([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10], [11, 12, 13, 14, 15], [16, 17, 18, 19, 20]])


def _decoded(model: PreTrainedModel, fused: bool) -> torch.Tensor:
    """The logits [B, 6, V]: after PROMPTS, then after each token of FED fed one a step, as the sampling loop reads
    them (``loop_logits``): through the copy's fused decoder, or the model's forward with its cache."""
    assert (decoder_of(model) is not None) == fused
    return loop_logits(model, PROMPTS, PROMPT_MASK, torch.cat([FED, FED[:, :1]], dim=1)).float()


def _mean_kl(reference: torch.Tensor, other: torch.Tensor) -> float:
    """mean over rows and steps of KL(softmax(reference) || softmax(other))."""
    log_p, log_q = reference.log_softmax(-1), other.log_softmax(-1)
    return float((log_p.exp() * (log_p - log_q)).sum(-1).mean())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotate_is_transformers_rotary_embedding(dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(0)
    states = torch.randn(4, 5, 16, generator=generator).to(dtype)
    angles = torch.rand(4, 1, 8, generator=generator) * 6
    cos, sin = torch.cat([angles, angles], -1).cos().to(dtype), torch.cat([angles, angles], -1).sin().to(dtype)
    theirs, _ = apply_rotary_pos_emb(states.unsqueeze(2), states.unsqueeze(2), cos, sin, unsqueeze_dim=1)
    signed = torch.cat([-sin[..., :8], sin[..., 8:]], dim=-1)
    assert torch.equal(rotate(states, cos, signed), theirs.squeeze(2))  # the same products, bit for bit


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_is_transformers_rms_norm(dtype: torch.dtype) -> None:
    norm = LlamaRMSNorm(24, eps=1e-5)
    norm.weight.data = torch.randn(24, generator=torch.Generator().manual_seed(1))
    norm.to(dtype)
    hidden = (torch.randn(5, 24, generator=torch.Generator().manual_seed(2)) * 3).to(dtype)
    torch.testing.assert_close(rms_norm(hidden, norm.weight, 1e-5), norm(hidden), atol=1e-6, rtol=1e-6)


def test_attend_equals_a_position_by_position_reference() -> None:
    """softmax(s q k_j + m_j) v_j summed one position at a time in float64, for every row's group of heads."""
    generator = torch.Generator().manual_seed(4)
    groups, group, length, dim = 6, 3, 7, 8
    queries = torch.randn(groups, group, dim, generator=generator)
    kept = torch.randn(2, groups, length, dim, generator=generator)
    additive = torch.zeros(groups, group, length)
    additive[:2, :, :3] = -math.inf  # left padding of the first row's two key/value heads
    ours = attend(queries, kept[0].transpose(1, 2), kept[1], additive, dim ** -0.5)
    for g in range(groups):
        for h in range(group):
            scores = [dim ** -0.5 * float(queries[g, h].double() @ kept[0, g, j].double()) + float(additive[g, h, j])
                      for j in range(length)]
            top = max(scores)
            weights = [math.exp(s - top) for s in scores]
            expected = sum(w / sum(weights) * kept[1, g, j].double() for j, w in enumerate(weights))
            torch.testing.assert_close(ours[g, h].double(), expected, atol=1e-5, rtol=1e-5)


def test_the_attention_mask_is_causal_over_kept_columns_and_a_query_always_sees_itself() -> None:
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 1]])  # row 0 left-padded; row 1 masks column 3
    for start in (0, 2, 4):
        additive = attention_mask(mask, start)
        assert additive.shape == (2, 5 - start, 5)
        for b in range(2):
            for t in range(5 - start):
                for c in range(5):
                    own = start + t
                    open_ = c == own or (c <= own and bool(mask[b, c]))
                    assert float(additive[b, t, c]) == (0.0 if open_ else -math.inf), (start, b, t, c)


@pytest.mark.parametrize("name", ["grouped_llama", "llama", "qwen2"])
def test_float32_decoding_is_the_models_forward(name: str, tmp_path: Path) -> None:
    model = _models(tmp_path)[name]
    plain = SamplingCopy(model, torch.float32, rows=4, fused=False)
    fused = SamplingCopy(model, torch.float32, rows=4)
    assert plain.decoder is None and fused.decoder is not None
    torch.testing.assert_close(_decoded(fused.model, True), _decoded(plain.model, False), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["grouped_llama", "llama", "qwen2"])
def test_bf16_decoding_is_as_close_to_float32_as_the_models_own_bf16(name: str, tmp_path: Path) -> None:
    model = _models(tmp_path)[name]
    reference = _decoded(SamplingCopy(model, torch.float32, rows=4, fused=False).model, False)
    own = _mean_kl(reference, _decoded(SamplingCopy(model, torch.bfloat16, rows=4, fused=False).model, False))
    ours = _mean_kl(reference, _decoded(SamplingCopy(model, torch.bfloat16, rows=4).model, True))
    assert own > 0  # bf16 rounds: the comparison has something to compare
    assert ours <= 2 * own + 1e-6


def test_the_decoder_follows_the_policy_once_refreshed(tmp_path: Path) -> None:
    policy = _grouped_llama()
    mirror = SamplingCopy(policy, torch.float32, rows=4)
    before = _decoded(mirror.model, True)
    with torch.no_grad():
        for parameter in policy.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    mirror.refresh()
    after = _decoded(mirror.model, True)
    assert not torch.allclose(before, after, atol=1e-3)
    torch.testing.assert_close(after, _decoded(SamplingCopy(policy, torch.float32, 4, fused=False).model, False),
                               atol=1e-5, rtol=1e-5)


def test_a_lora_refresh_packs_again_only_what_moved(tmp_path: Path) -> None:
    base = _grouped_llama().requires_grad_(False)
    adapted = get_peft_model(base, LoraConfig(r=2, lora_alpha=4, target_modules="all-linear", lora_dropout=0.0))
    policy = cast(PreTrainedModel, adapted)  # forwards as the model it wraps
    mirror = SamplingCopy(policy, torch.float32, rows=4)
    assert mirror.decoder is not None
    head, qkv = mirror.decoder.head.packed, mirror.decoder.layers[0].qkv.packed
    with torch.no_grad():
        for name, parameter in policy.named_parameters():
            if "lora_B" in name:
                parameter.add_(0.1)
    mirror.refresh()
    assert mirror.decoder.head.packed is head  # the tied head is no adapter's: left as packed
    assert mirror.decoder.layers[0].qkv.packed is not qkv
    torch.testing.assert_close(_decoded(mirror.model, True),
                               _decoded(SamplingCopy(policy, torch.float32, 4, fused=False).model, False),
                               atol=1e-5, rtol=1e-5)


def test_sampling_with_the_decoder_draws_what_the_forward_draws(tmp_path: Path) -> None:
    model = load_left_padded("llama", tmp_path)[0]
    drawn = []
    for fused in (False, True):
        torch.manual_seed(7)
        mirror = SamplingCopy(model, torch.float32, rows=4, fused=fused)
        drawn.append(sample_responses(mirror.model, PROMPTS, PROMPT_MASK, 8, 1.0, None, 0)[0])
    # The same uniforms against logits equal to float rounding: a token differs only where a uniform lands within
    # rounding of a boundary between two tokens.
    assert float((drawn[0] == drawn[1]).float().mean()) >= 0.9


def test_other_architectures_and_changed_layers_decode_through_the_forward(tmp_path: Path) -> None:
    gpt2 = load_left_padded("gpt2", tmp_path)[0]
    assert not decodable(gpt2) and SamplingCopy(gpt2, torch.float32, rows=4).decoder is None

    class Scaled(LlamaAttention):
        """A subclass computes something else: the decoder does not read it."""

    changed = _grouped_llama()
    attention = changed.model.layers[1].self_attn
    attention.__class__ = Scaled
    assert not decodable(changed)
    silu_free = _grouped_llama()
    silu_free.config.hidden_act = "gelu"
    assert not decodable(silu_free)
    assert decodable(_grouped_llama())


def test_the_config_switch_turns_it_off(tmp_path: Path) -> None:
    policy = copy.deepcopy(_grouped_llama())
    on = sampling_copy(PPOConfig(sampling_dtype="bfloat16"), policy, torch.device("cpu"))
    off = sampling_copy(PPOConfig(sampling_dtype="bfloat16", fused_decode=False), policy, torch.device("cpu"))
    assert on is not None and on.decoder is not None and decoder_of(on.model) is on.decoder
    assert off is not None and off.decoder is None and decoder_of(off.model) is None
