"""GPT-2's tanh GELU, computed op by op by transformers, runs as torch's fused kernel in every model ppo_core loads."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM
from transformers.activations import FastGELUActivation, NewGELUActivation

from ppo_core.models.loading import (
    UNFUSED_TANH_GELUS,
    LoadOptions,
    fuse_activations,
    load_causal_lm,
    load_tokenizer,
    load_trunk,
)
from ppo_core.rewards.models import SequenceClassifierReward


def _unfused(model: torch.nn.Module) -> list[str]:
    return [name for name, module in model.named_modules() if isinstance(module, UNFUSED_TANH_GELUS)]


def test_the_tiny_gpt2_really_computes_gelu_op_by_op(tiny_lm_dir: Path) -> None:
    # Without this the tests below would pass on a model that never had anything to fuse.
    assert _unfused(AutoModelForCausalLM.from_pretrained(tiny_lm_dir))


@pytest.mark.parametrize("activation", [NewGELUActivation, FastGELUActivation])
def test_fused_gelu_computes_the_same_values_and_gradients(activation: type[torch.nn.Module]) -> None:
    x = torch.linspace(-8, 8, 4001, dtype=torch.float64, requires_grad=True)
    reference = activation()(x)
    (reference_grad,) = torch.autograd.grad(reference.sum(), x)
    holder = torch.nn.Sequential(activation())
    fuse_activations(holder)
    assert not _unfused(holder)
    fused = holder(x)
    (fused_grad,) = torch.autograd.grad(fused.sum(), x)
    # float64, so only the formula can differ: gelu_fast's 10-digit √(2/π) moves values by about 1e-12.
    torch.testing.assert_close(fused, reference, rtol=0, atol=1e-10)
    torch.testing.assert_close(fused_grad, reference_grad, rtol=0, atol=1e-10)


def test_every_loader_fuses_and_logits_match_the_unfused_model(tiny_lm_dir: Path, tiny_rm_dir: Path) -> None:
    loaded = load_causal_lm(str(tiny_lm_dir))
    assert not _unfused(loaded)
    assert not _unfused(load_trunk(str(tiny_lm_dir)))
    reward = SequenceClassifierReward(str(tiny_rm_dir), LoadOptions(), 4, load_tokenizer(str(tiny_lm_dir)),
                                      name="reward")
    assert not _unfused(reward.model)

    plain = AutoModelForCausalLM.from_pretrained(tiny_lm_dir).eval()
    ids = torch.randint(0, plain.config.vocab_size, (3, 17), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, plain(ids).logits, rtol=0, atol=1e-5)


def test_saved_model_keeps_its_own_activation_name(tiny_lm_dir: Path, tmp_path: Path) -> None:
    # The swap is of modules only: the user's config still names the activation it was trained with.
    loaded = load_causal_lm(str(tiny_lm_dir))
    loaded.save_pretrained(tmp_path)
    assert AutoModelForCausalLM.from_pretrained(tmp_path).config.activation_function == \
        AutoModelForCausalLM.from_pretrained(tiny_lm_dir).config.activation_function

