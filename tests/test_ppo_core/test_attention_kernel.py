"""The attention kernel of the forwards behind the PPO ratio: torch's math kernel on a CPU in bf16 over short
sequences, in the update and in the rollout's scoring alike, and torch's own choice elsewhere.

That the rollout and the update choose alike is held by
``test_lora_precision.py::test_zero_learning_rate_under_lora_bf16_and_checkpointing_keeps_the_ratio_at_one``: with
the rollout left on torch's choice, its first ratio moved to 0.99991."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers.tiny_runs import letter_run
from torch.profiler import ProfilerActivity, profile
from transformers import AutoModelForCausalLM

from ppo_core import PPOConfig, PPOTrainer
from ppo_core.models.attention_kernel import MATH_MAX_TOKENS, attention_dtype, prefers_math_attention, ratio_attention
from tools import tiny_models

FLASH = "aten::_scaled_dot_product_flash_attention_for_cpu"


def ops_of(run: Callable[[], Any]) -> set[str]:
    """The names of the torch operators ``run`` calls."""
    with profile(activities=[ProfilerActivity.CPU]) as recorded:
        run()
    return {event.key for event in recorded.key_averages()}


@pytest.mark.parametrize(("device", "dtype", "tokens", "math"), [
    ("cpu", torch.bfloat16, 19, True),
    ("cpu", torch.bfloat16, MATH_MAX_TOKENS, True),
    ("cpu", torch.bfloat16, MATH_MAX_TOKENS + 1, False),
    ("cpu", torch.float32, 19, False),
    ("cpu", torch.float16, 19, False),
    ("cuda", torch.bfloat16, 19, False),
])
def test_the_math_kernel_runs_only_on_a_cpu_in_bf16_over_short_sequences(device: str, dtype: torch.dtype,
                                                                          tokens: int, math: bool) -> None:
    assert prefers_math_attention(device, dtype, tokens) is math


def test_the_dtype_is_accelerates_then_autocasts_then_the_weights() -> None:
    model = torch.nn.Linear(2, 2)
    cpu = torch.device("cpu")
    assert attention_dtype(model, cpu) == torch.float32
    assert attention_dtype(model, cpu, mixed_precision="bf16") == torch.bfloat16  # the prepared model autocasts
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert attention_dtype(model, cpu) == torch.bfloat16
    assert attention_dtype(model.to(torch.bfloat16), cpu) == torch.bfloat16


def test_the_switch_changes_the_kernel_and_not_the_logits(tmp_path: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_models.write_llama(tmp_path / "llama", seed=1))
    tokens = torch.randint(0, model.config.vocab_size, (4, 12))
    cpu = torch.device("cpu")

    def forward_backward(kernel_dtype: torch.dtype) -> torch.Tensor:
        model.zero_grad()
        with ratio_attention(kernel_dtype, cpu, tokens.shape[1]), torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(tokens).logits.float()
            logits.logsumexp(-1).sum().backward()
        return logits.detach()

    flash_logits: list[torch.Tensor] = []
    math_logits: list[torch.Tensor] = []
    assert FLASH in ops_of(lambda: flash_logits.append(forward_backward(torch.float32)))  # torch's own choice
    assert FLASH not in ops_of(lambda: math_logits.append(forward_backward(torch.bfloat16)))
    # Two kernels' bf16 rounding, not two functions.
    torch.testing.assert_close(math_logits[0], flash_logits[0], atol=0.05, rtol=0.02)


def test_a_bf16_run_scores_and_updates_by_the_math_kernel_and_evaluates_by_torchs(tmp_path: Path) -> None:
    trainer = PPOTrainer(PPOConfig(**letter_run(tmp_path, 16, use_peft=True, dtype="bfloat16", total_episodes=8,
                                                per_device_train_batch_size=4, num_generations=2,
                                                response_length=6, num_eval_prompts=4)))
    assert trainer.accelerator.mixed_precision == "bf16"
    assert FLASH not in ops_of(lambda: trainer.step(1))  # the rollout's scoring and the update
    assert FLASH in ops_of(lambda: trainer.evaluate(1))
