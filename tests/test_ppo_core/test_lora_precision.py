"""Trials that fit real models: LoRA through peft, frozen weights in a low precision, gradient checkpointing and the
per-update memory peak, on tiny real models of several architectures, through the code users run."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from peft import AutoPeftModelForCausalLM, PeftModel
from torch import nn
from transformers import AutoModelForCausalLM

from ppo_core import PPOConfig, PPOTrainer
from ppo_core.config.ppo_config import ConfigError
from ppo_core.metric_names import run_metrics
from ppo_core.models.loading import LoadOptions, add_adapter, load_causal_lm
from ppo_core.rollout.collect import response_logits
from ppo_core.setup.trained_models import lora_config
from ppo_tune.cli import main
from tools import tiny_data, tiny_models

LETTER_REWARD = "examples.bring_your_own.rewards:letter_reward"


@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("lora")
    paths: dict[str, Path] = {name: writer(root / name, seed=1) for name, writer in tiny_models.ARCHITECTURES.items()}
    paths["rm"] = tiny_models.write_reward_model(root / "rm", architecture="llama")
    paths["data"] = tiny_data.write_jsonl_splits(root / "data", "standard", n_train=32, n_test=8)
    return paths


def run_values(assets: dict[str, Path], architecture: str = "llama", **overrides: Any) -> dict[str, Any]:
    return {
        "task": None, "sft_model_path": str(assets[architecture]), "dataset_name": str(assets["data"]),
        "reward_model_path": str(assets["rm"]), "response_length": 6, "per_device_train_batch_size": 8,
        "total_episodes": 16, "num_ppo_epochs": 2, "num_sample_generations": 0, "learning_rate": 1e-3,
        "lora_r": 4, **overrides,
    }


def parameter_bytes(*modules: nn.Module) -> int:
    """Bytes of the distinct parameter storages the modules hold: a weight two modules share counts once."""
    seen: dict[int, int] = {}
    for module in modules:
        for parameter in module.parameters():
            seen[parameter.data_ptr()] = parameter.numel() * parameter.element_size()
    return sum(seen.values())


def model_bytes(trainer: PPOTrainer) -> int:
    models = trainer.setup.models
    frozen = [models.reference] if models.reference is not None else []
    return parameter_bytes(models.policy, models.value_model, *frozen,
                           *[reward.model for reward in models.rewards.rewards])


@pytest.mark.parametrize("architecture", ["gpt2", "gpt_neox", "llama", "qwen2"])
def test_lora_from_the_cli_trains_the_adapter_only_and_saves_it_loadable_and_merged(
    assets: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], architecture: str,
) -> None:
    config = tmp_path / "lora.yaml"
    config.write_text(yaml.safe_dump(run_values(assets, architecture, use_peft=True)))
    out = tmp_path / "out"
    assert main(["train", str(config), "--output", str(out), "--merge"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["trainable_parameters"]["policy"] < 0.10 * summary["total_parameters"]["policy"]
    assert summary["merged_model"] == str(out / "merged")
    assert "policy: " in captured.err and "parameters trainable" in captured.err
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    # The adapters start at zero, so the first rollout's policy is exactly the reference.
    assert metrics[0]["objective/kl"] == pytest.approx(0.0, abs=1e-6)
    assert all(m["memory/peak_gib"] > 0 for m in metrics)

    assert (out / "model" / "adapter_config.json").exists() and not (out / "model" / "model.safetensors").exists()
    adapted = AutoPeftModelForCausalLM.from_pretrained(out / "model")
    lora_b = [p for name, p in adapted.named_parameters() if "lora_B" in name]
    assert lora_b and any(p.abs().sum() > 0 for p in lora_b)  # trained, not the zero it started from
    merged = AutoModelForCausalLM.from_pretrained(out / "merged")
    assert not isinstance(merged, PeftModel)
    ids = torch.tensor([[3, 4, 5, 6, 7]])
    with torch.no_grad():
        torch.testing.assert_close(merged(ids).logits, adapted(ids).logits, atol=1e-4, rtol=1e-4)
        base = AutoModelForCausalLM.from_pretrained(assets[architecture])
        assert not torch.allclose(base(ids).logits, merged(ids).logits, atol=1e-4)


def test_the_lora_reference_is_the_frozen_base_not_a_second_copy(assets: dict[str, Path]) -> None:
    full = PPOTrainer(PPOConfig(**run_values(assets)))
    lora = PPOTrainer(PPOConfig(**run_values(assets, use_peft=True)))
    assert full.setup.models.reference is not None and lora.setup.models.reference is None
    policy_bytes = parameter_bytes(full.setup.models.policy)
    # One copy of the policy's weights fewer (the LoRA adapters add back a little).
    assert model_bytes(lora) < model_bytes(full) - 0.9 * policy_bytes
    base = load_causal_lm(str(assets["llama"])).to(lora.accelerator.device)  # the GPU on a machine with one
    initial = {name: p.detach().clone() for name, p in base.named_parameters()}
    lora.train()
    rollout = lora._rollout(lora.setup.eval_prompts)
    trained_base = {name.replace("base_model.model.", "").replace(".base_layer", ""): p
                    for name, p in lora.setup.models.policy.named_parameters() if "lora_" not in name}
    assert all(torch.equal(trained_base[name], value) for name, value in initial.items())  # the base never moves
    args = (rollout.queries, rollout.query_mask, rollout.responses, rollout.response_mask)
    # Under the run's precision, as the rollout computes: bf16 autocast on a GPU by default (the prepared policy's
    # forward is autocast whatever the caller), none on the CPU.
    with torch.no_grad(), lora.accelerator.autocast():
        base_logits = response_logits(base, *args).float()
        with lora.setup.models.reference_policy() as reference:
            torch.testing.assert_close(response_logits(reference, *args).float(), base_logits)
        # Outside the reference's block the adapters are back on.
        assert not torch.allclose(response_logits(lora.setup.models.policy, *args).float(), base_logits)


def test_the_value_network_is_a_lora_on_its_trunk_or_a_full_model_when_asked(assets: dict[str, Path]) -> None:
    lora = PPOTrainer(PPOConfig(**run_values(assets, use_peft=True)))
    value = lora.setup.models.value_model
    assert isinstance(value.trunk, PeftModel)
    assert all(p.requires_grad for p in value.head.parameters())
    assert lora.parameter_counts["value"].fraction < 0.10
    full = PPOTrainer(PPOConfig(**run_values(assets, use_peft=True, value_use_peft=False)))
    assert not isinstance(full.setup.models.value_model.trunk, PeftModel)
    assert full.parameter_counts["value"].fraction == 1.0
    assert isinstance(full.setup.models.policy, PeftModel)


def test_frozen_weights_take_dtype_and_trained_ones_stay_float32(assets: dict[str, Path]) -> None:
    lora = PPOTrainer(PPOConfig(**run_values(assets, use_peft=True, dtype="bfloat16")))
    models = lora.setup.models
    dtypes = {name: p.dtype for name, p in models.policy.named_parameters()}
    assert {dtypes[name] for name in dtypes if "lora_" in name} == {torch.float32}
    assert {dtypes[name] for name in dtypes if "lora_" not in name} == {torch.bfloat16}
    assert models.value_model.head.weight.dtype == torch.float32
    assert {p.dtype for p in models.rewards.rewards[0].model.parameters()} == {torch.bfloat16}
    assert lora.accelerator.mixed_precision == "bf16"  # bf16 frozen weights: autocast computes alike

    full = PPOTrainer(PPOConfig(**run_values(assets, dtype="bfloat16")))
    assert {p.dtype for p in full.setup.models.policy.parameters()} == {torch.float32}
    assert full.setup.models.reference is not None
    assert {p.dtype for p in full.setup.models.reference.parameters()} == {torch.bfloat16}


def test_zero_learning_rate_under_lora_bf16_and_checkpointing_keeps_the_ratio_at_one(assets: dict[str, Path]) -> None:
    config = PPOConfig(**run_values(assets, use_peft=True, dtype="bfloat16", gradient_checkpointing=True,
                                    learning_rate=0.0, value_learning_rate=0.0))
    for metrics in PPOTrainer(config).train().metrics:
        assert metrics["objective/kl"] == pytest.approx(0.0, abs=1e-6)
        assert metrics["val/ratio"] == pytest.approx(1.0, abs=1e-6)
        assert metrics["policy/approxkl_avg"] == pytest.approx(0.0, abs=1e-8)


@pytest.mark.parametrize("use_peft", [False, True])
def test_gradient_checkpointing_recomputes_and_changes_nothing_else(assets: dict[str, Path], use_peft: bool) -> None:
    def run(checkpointing: bool) -> tuple[list[dict[str, float]], int]:
        # Whole-sequence forwards in both runs (checkpointing keeps no KV cache to share prompts through), so
        # that the layer's calls differ by the recomputation alone.
        trainer = PPOTrainer(PPOConfig(**run_values(assets, use_peft=use_peft, gradient_checkpointing=checkpointing,
                                                    shared_prompt_forwards=False)))
        # transformers checkpoints a layer's forward, not its call, so the layer's own hooks see one pass; its
        # sub-modules are called again by the recomputation. A pre-hook, since the recomputation stops early
        # once it has what the backward needs.
        mlp = next(module for name, module in trainer.setup.models.policy.named_modules()
                   if name.endswith("layers.0.mlp"))
        calls = []
        mlp.register_forward_pre_hook(lambda *_: calls.append(1))
        metrics = trainer.train().metrics
        return [run_metrics(m) for m in metrics], len(calls)

    plain, plain_calls = run(False)
    checkpointed, checkpointed_calls = run(True)
    assert checkpointed_calls > plain_calls  # the backward pass ran the layer again
    for a, b in zip(plain, checkpointed, strict=True):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-6)



@pytest.mark.parametrize("architecture", sorted(tiny_models.ARCHITECTURES))
def test_adding_an_adapter_prints_no_warning_of_peft_s_own(assets: dict[str, Path], architecture: str) -> None:
    # peft warned twice for every adapter (GPT-2's Conv1D and fan_in_fan_out; transformers 5's deprecated
    # is_gradient_checkpointing), and a study printed both for every trial. Any other warning still shows.
    model = load_causal_lm(str(assets[architecture]), LoadOptions())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        adapted = add_adapter(model, lora_config(PPOConfig(use_peft=True, lora_r=4), "CAUSAL_LM"), "sft_model_path")
        warnings.warn("a warning of the caller's", UserWarning, stacklevel=1)
    assert isinstance(adapted, PeftModel)
    assert [str(w.message) for w in caught] == ["a warning of the caller's"]

def test_a_lora_target_that_matches_nothing_is_a_one_line_error(assets: dict[str, Path]) -> None:
    with pytest.raises(ConfigError, match=r"^lora_target_modules: cannot add a LoRA adapter to 'llama'") as error:
        PPOTrainer(PPOConfig(**run_values(assets, use_peft=True, lora_target_modules=["no_such_module"])))
    assert "\n" not in str(error.value)


def test_lora_fields_are_checked_when_the_config_is_built() -> None:
    with pytest.raises(ConfigError, match=r"^lora_r: must be >= 1, got 0$"):
        PPOConfig(use_peft=True, lora_r=0)
    with pytest.raises(ConfigError, match=r"^lora_dropout: must be in \[0, 1\), got 1.0$"):
        PPOConfig(use_peft=True, lora_dropout=1.0)
