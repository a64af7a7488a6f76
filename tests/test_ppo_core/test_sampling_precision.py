"""ppo_core.models.sampling_precision: bf16 is chosen only where the check finds it clearly faster, the check times the
model's own product shapes, and its answer is cached per machine and shapes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from peft import LoraConfig, get_peft_model
from torch import nn
from transformers import AutoModelForCausalLM, LlamaConfig

from ppo_core.models import sampling_precision
from ppo_core.models.sampling_precision import (
    MIN_CHECKED_WEIGHTS,
    choose_sampling_dtype,
    measured_sampling_dtype,
    weight_shapes,
)
from tools import tiny_models


def _shapes_only_llama(vocab_size: int) -> nn.Module:
    """A Llama on the meta device (its shapes, no weights), with about ``vocab_size`` x 256 head weights."""
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4)
    with torch.device("meta"):
        model: nn.Module = AutoModelForCausalLM.from_config(config)
    return model


def _bf16_always_faster(calls: list[int]) -> object:
    def timed(shapes: list[tuple[int, int]], rows: int) -> dict[str, float]:
        calls.append(rows)
        return {"float32": 0.06, "bfloat16": 0.02}
    return timed


@pytest.mark.parametrize(("float32", "bfloat16", "chosen"), [
    (0.060, 0.024, "bfloat16"),  # AVX-512 BF16 or AMX: bf16 2.5x faster
    (0.060, 0.048, "bfloat16"),  # exactly the margin
    (0.060, 0.050, "float32"),  # faster, but inside the margin: rounding the distribution is not worth it
    (0.060, 0.060, "float32"),
    (0.033, 1.800, "float32"),  # AVX2 alone: torch emulates bf16, 50x slower
])
def test_bf16_is_chosen_only_when_clearly_faster(float32: float, bfloat16: float, chosen: str) -> None:
    assert choose_sampling_dtype({"float32": float32, "bfloat16": bfloat16}) == chosen


def test_the_check_times_the_models_own_products_head_first(tmp_path: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_models.write_llama(tmp_path / "llama", seed=1))
    shapes = weight_shapes(model)
    head = model.get_output_embeddings().weight
    assert shapes[0] == tuple(head.shape)
    assert (model.config.intermediate_size, model.config.hidden_size) in shapes  # the MLP's up projection
    lora = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear"))
    assert weight_shapes(lora) == shapes  # a merged copy has no LoRA factors to time
    assert weight_shapes(model, limit=head.numel()) == [tuple(head.shape)]


def test_gpt2s_conv1d_weights_are_timed_as_out_by_in(tmp_path: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_models.write_gpt2(tmp_path / "gpt2", seed=1))
    hidden = model.config.n_embd
    assert (3 * hidden, hidden) in weight_shapes(model)  # c_attn: stored (in, out) = (hidden, 3 hidden)


def test_the_choice_is_measured_once_then_read_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _shapes_only_llama(vocab_size=8192)
    assert sum(o * i for o, i in weight_shapes(model)) >= MIN_CHECKED_WEIGHTS
    calls: list[int] = []
    monkeypatch.setattr(sampling_precision, "product_seconds", _bf16_always_faster(calls))
    first = measured_sampling_dtype(model, rows=8, cache_dir=tmp_path / "cache")
    again = measured_sampling_dtype(model, rows=8, cache_dir=tmp_path / "cache")
    assert first == again and first.dtype == "bfloat16" and calls == [8]
    other_rows = measured_sampling_dtype(model, rows=64, cache_dir=tmp_path / "cache")
    assert other_rows.dtype == "bfloat16" and calls == [8, 64]  # another shape is another check
    assert len(list((tmp_path / "cache" / "sampling_precision").glob("*.json"))) == 2


def test_a_tiny_model_samples_in_float32_whatever_a_loaded_machine_times(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # Regression: a test model's products take microseconds, and a check that timed bf16 past the margin under load
    # ran float32-exact tests in bf16 (4 failed when this check is forced to bf16).
    model = AutoModelForCausalLM.from_pretrained(tiny_models.write_llama(tmp_path / "llama", seed=1))
    assert sum(o * i for o, i in weight_shapes(model)) < MIN_CHECKED_WEIGHTS
    calls: list[int] = []
    monkeypatch.setattr(sampling_precision, "product_seconds", _bf16_always_faster(calls))
    choice = measured_sampling_dtype(model, rows=8, cache_dir=tmp_path / "cache")
    assert choice.dtype == "float32" and choice.seconds == {} and calls == []  # not timed, not cached
    assert not (tmp_path / "cache").exists()
    assert measured_sampling_dtype(_shapes_only_llama(vocab_size=8192), rows=8,
                                   cache_dir=tmp_path / "cache").dtype == "bfloat16"  # a larger one is checked
