"""ppo_core.models.sampling_precision: bf16 is chosen only where the check finds it clearly faster, the check times the
model's own product shapes, and its answer is cached per machine and shapes."""

from __future__ import annotations

from pathlib import Path

import pytest
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from ppo_core.models import sampling_precision
from ppo_core.models.sampling_precision import choose_sampling_dtype, measured_sampling_dtype, weight_shapes
from tools import tiny_models


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
    model = AutoModelForCausalLM.from_pretrained(tiny_models.write_llama(tmp_path / "llama", seed=1))
    calls: list[int] = []

    def timed(shapes: list[tuple[int, int]], rows: int) -> dict[str, float]:
        calls.append(rows)
        return {"float32": 0.06, "bfloat16": 0.02}

    monkeypatch.setattr(sampling_precision, "product_seconds", timed)
    first = measured_sampling_dtype(model, rows=8, cache_dir=tmp_path / "cache")
    again = measured_sampling_dtype(model, rows=8, cache_dir=tmp_path / "cache")
    assert first == again and first.dtype == "bfloat16" and calls == [8]
    other_rows = measured_sampling_dtype(model, rows=64, cache_dir=tmp_path / "cache")
    assert other_rows.dtype == "bfloat16" and calls == [8, 64]  # another shape is another check
    assert len(list((tmp_path / "cache" / "sampling_precision").glob("*.json"))) == 2
