"""``ppo-tune train CONFIG --estimate``: parameter counts against real loaded models, the memory rules, the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from peft import get_peft_model
from torch import nn
from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSequenceClassification

from ppo_core.config.ppo_config import ConfigError, PPOConfig
from ppo_core.memory.estimate import estimate_run
from ppo_core.memory.sizes import (
    Shape,
    kv_cache_bytes,
    layer_activation_bytes,
    rollout_logits_bytes,
    trunk_activation_bytes,
    update_logits_bytes,
    weight_bytes,
)
from ppo_core.models.loading import load_tokenizer
from ppo_core.setup.run_setup import build_setup, run_sources
from ppo_core.setup.trained_models import lora_config
from ppo_tune.cli import main
from tools.tiny_models import chatml_tokenizer, write_gpt2, write_llama, write_qwen2, write_reward_model

ARCHITECTURES = ["gpt2", "llama", "qwen2"]
RESPONSE_LENGTH = 8


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny policies of three families and reward models: one sharing Qwen2's vocabulary, one with its own."""
    root = tmp_path_factory.mktemp("estimate_models")
    return {
        "gpt2": write_gpt2(root / "gpt2"),
        "llama": write_llama(root / "llama"),
        "qwen2": write_qwen2(root / "qwen2"),
        "reward_qwen2": write_reward_model(root / "reward_qwen2", architecture="qwen2", tokenizer=chatml_tokenizer()),
        "reward_other": write_reward_model(root / "reward_other", architecture="llama", tokenizer="word_level"),
    }


def run_config(models: dict[str, Path], prompts_file: Path, policy: str = "llama", **fields: Any) -> PPOConfig:
    values: dict[str, Any] = {
        "task": None, "sft_model_path": str(models[policy]), "dataset_name": str(prompts_file),
        "reward_model_path": str(models["reward_other"]), "response_length": RESPONSE_LENGTH, **fields,
    }
    return PPOConfig(**values)


def numel(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def trainable_numel(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_full_counts_equal_the_loaded_models(architecture: str, models: dict[str, Path], prompts_file: Path) -> None:
    estimate = estimate_run(run_config(models, prompts_file, architecture))
    policy_size = numel(AutoModelForCausalLM.from_pretrained(models[architecture]))
    trunk = AutoModel.from_pretrained(models[architecture])
    policy, reference, value = (estimate.model(role) for role in ("policy", "reference", "value"))
    assert (policy.trainable, policy.frozen, policy.frozen_dtype) == (policy_size, 0, "float32")
    assert (reference.trainable, reference.frozen) == (0, policy_size)
    assert estimate.model("reward").frozen == numel(AutoModelForSequenceClassification.from_pretrained(
        models["reward_other"]))
    # The reward model's word-level vocabulary is not the policy's: the value trunk is the policy's, plus its head.
    assert value.path == str(models[architecture])
    assert (value.trainable, value.frozen) == (numel(trunk) + trunk.config.hidden_size + 1, 0)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.parametrize("targets", [None, ["all-linear"]])
def test_lora_counts_equal_peft_on_the_loaded_models(
    architecture: str, targets: list[str] | None, models: dict[str, Path], prompts_file: Path
) -> None:
    config = run_config(models, prompts_file, architecture, use_peft=True, lora_r=4, lora_target_modules=targets)
    estimate = estimate_run(config)
    policy = get_peft_model(AutoModelForCausalLM.from_pretrained(models[architecture]),
                            lora_config(config, config.lora_task_type))
    trunk = get_peft_model(AutoModel.from_pretrained(models[architecture]), lora_config(config, None))
    head = trunk.config.hidden_size + 1
    assert (estimate.model("policy").trainable, estimate.model("policy").total) == \
        (trainable_numel(policy), numel(policy))
    assert (estimate.model("value").trainable, estimate.model("value").total) == \
        (trainable_numel(trunk) + head, numel(trunk) + head)
    # The reference is the policy with its adapters disabled: no second copy.
    assert estimate.model("reference").memory_bytes == 0


def test_a_critic_free_estimator_counts_no_value_network(models: dict[str, Path], prompts_file: Path) -> None:
    with_critic = estimate_run(run_config(models, prompts_file))
    critic_free = estimate_run(run_config(models, prompts_file, advantage_estimator="grpo"))
    assert [m.role for m in critic_free.models] == [m.role for m in with_critic.models if m.role != "value"]
    assert critic_free.activations.value_activations == 0
    # The value network's weights, gradients, AdamW moments and activations are all that is saved.
    value = with_critic.model("value")
    assert with_critic.peak_bytes > critic_free.peak_bytes
    assert with_critic.weight_bytes - critic_free.weight_bytes == value.memory_bytes


def test_value_use_peft_false_trains_the_whole_trunk(models: dict[str, Path], prompts_file: Path) -> None:
    estimate = estimate_run(run_config(models, prompts_file, use_peft=True, value_use_peft=False))
    trunk = AutoModel.from_pretrained(models["llama"])
    value = estimate.model("value")
    assert (value.trainable, value.frozen) == (numel(trunk) + trunk.config.hidden_size + 1, 0)
    assert estimate.model("policy").frozen > 0


@pytest.mark.parametrize("use_peft", [False, True])
def test_bfloat16_halves_the_frozen_bytes_only(use_peft: bool, models: dict[str, Path], prompts_file: Path) -> None:
    wide = estimate_run(run_config(models, prompts_file, use_peft=use_peft, dtype="float32"))
    narrow = estimate_run(run_config(models, prompts_file, use_peft=use_peft, dtype="bfloat16"))
    for role in ("policy", "reference", "reward", "value"):
        before, after = wide.model(role), narrow.model(role)
        assert (after.trainable, after.frozen) == (before.trainable, before.frozen)
        # Trained weights stay float32 with gradients and AdamW moments: 16 bytes each, whatever dtype says.
        assert after.memory_bytes == 16 * before.trainable + 2 * before.frozen
        assert before.memory_bytes == 16 * before.trainable + 4 * before.frozen
    if use_peft:
        assert narrow.model("policy").frozen > 0
    else:
        assert narrow.model("reference").memory_bytes * 2 == wide.model("reference").memory_bytes


def test_auto_dtype_reads_each_checkpoint(models: dict[str, Path], prompts_file: Path, tmp_path: Path) -> None:
    half = tmp_path / "llama_bf16"
    # transformers wraps to() with functools.wraps, whose typed wrapper mypy does not bind to the instance.
    AutoModelForCausalLM.from_pretrained(models["llama"]).to(torch.bfloat16).save_pretrained(half)  # type: ignore[arg-type]
    load_tokenizer(str(models["llama"])).save_pretrained(half)
    estimate = estimate_run(run_config(models, prompts_file, sft_model_path=str(half), dtype="auto"))
    assert estimate.model("reference").frozen_dtype == "bfloat16"
    assert estimate.model("reward").frozen_dtype == "float32"  # saved in float32


def test_value_trunk_is_the_first_reward_model_sharing_the_vocabulary(
    models: dict[str, Path], prompts_file: Path
) -> None:
    rewards = {"reward_model_path": str(models["reward_other"]),
               "reward_funcs": ["tests.reward_functions:count_letter_a", str(models["reward_qwen2"])]}
    estimate = estimate_run(run_config(models, prompts_file, "qwen2", **rewards))
    # A module:function reward holds no model.
    assert [m.path for m in estimate.models if m.role == "reward"] == [str(models["reward_other"]),
                                                                      str(models["reward_qwen2"])]
    trunk = AutoModel.from_pretrained(models["reward_qwen2"])
    value = estimate.model("value")
    assert value.path == str(models["reward_qwen2"])
    assert value.trainable == numel(trunk) + trunk.config.hidden_size + 1
    chosen = estimate_run(run_config(models, prompts_file, "qwen2", value_model_path=str(models["gpt2"]), **rewards))
    assert chosen.model("value").path == str(models["gpt2"])


@pytest.mark.parametrize(("policy", "fields"), [
    ("qwen2", {"reward_funcs": ["tests.reward_functions:count_letter_a", "REWARD_QWEN2"]}),  # a reward model's trunk
    ("llama", {}),  # the only reward model reads another vocabulary: the policy's trunk
    ("qwen2", {"value_model_path": "GPT2"}),
])
def test_the_estimate_sizes_the_value_trunk_a_run_loads(models: dict[str, Path], prompts_file: Path, policy: str,
                                                          fields: dict[str, Any]) -> None:
    named = {"REWARD_QWEN2": str(models["reward_qwen2"]), "GPT2": str(models["gpt2"])}
    resolved = {key: [named.get(v, v) for v in value] if isinstance(value, list) else named.get(value, value)
                for key, value in fields.items()}
    config = run_config(models, prompts_file, policy, **resolved)
    loaded = build_setup(config, run_sources(config), torch.device("cpu")).models.value_model
    assert loaded is not None
    assert estimate_run(config).model("value").path == loaded.trunk.config.name_or_path


def test_tokens_per_update_from_the_measured_prompts(models: dict[str, Path], prompts_file: Path) -> None:
    config = run_config(models, prompts_file, per_device_train_batch_size=4, gradient_accumulation_steps=2)
    tokenizer = load_tokenizer(str(models["llama"]))
    lengths = [len(ids) for ids in tokenizer(prompts_file.read_text().splitlines())["input_ids"]]
    tokens = estimate_run(config).tokens
    assert (tokens.prompt_tokens_max, tokens.prompt_tokens_mean) == (max(lengths), pytest.approx(sum(lengths) / 64))
    assert tokens.tokens_per_update == 8 * (max(lengths) + RESPONSE_LENGTH)
    capped = estimate_run(run_config(models, prompts_file, max_prompt_length=3, response_length=None)).tokens
    # max_prompt_length stands in for the prompts; with neither a task nor response_length, TRL's 53 tokens.
    assert (capped.prompt_tokens_max, capped.response_length, capped.tokens_per_update) == (3, 53, 8 * (3 + 53))


SHAPE = Shape(num_layers=2, hidden_size=8, num_heads=2, num_kv_heads=1, head_dim=4, vocab_size=10)


def test_memory_formulas_by_hand() -> None:
    s, b = 5, 3
    assert weight_bytes(trainable=10, frozen=7, frozen_dtype="bfloat16") == 10 * 16 + 7 * 2
    assert layer_activation_bytes(SHAPE, s, b, itemsize=2, attention_scores=False) == s * b * 8 * 34
    # Eager attention stores the s x s scores: 5·a·s²·b more bytes per layer.
    assert layer_activation_bytes(SHAPE, s, b, itemsize=2, attention_scores=True) == s * b * 8 * 34 + 5 * 2 * s * s * b
    assert layer_activation_bytes(SHAPE, s, b, itemsize=4, attention_scores=False) == 2 * s * b * 8 * 34
    layer = s * b * 8 * 34
    assert trunk_activation_bytes(SHAPE, s, b, 2, False, checkpointing=False) == 2 * layer
    assert trunk_activation_bytes(SHAPE, s, b, 2, False, checkpointing=True) == 2 * s * b * 8 * 2 + layer
    assert kv_cache_bytes(SHAPE, s, b, itemsize=2) == 2 * 2 * 1 * 4 * s * b * 2
    assert update_logits_bytes(rows=b, response_length=4, vocab_size=10) == 2 * b * 5 * 10 * 4
    # The policy's and reference's logits (bf16 here), then a float32 scaled copy and log-softmax.
    assert rollout_logits_bytes(rows=b, response_length=4, vocab_size=10, itemsize=2) == b * 5 * 10 * (2 + 8)


def test_autocast_copies_every_float32_weight_of_the_trained_networks(
    models: dict[str, Path], prompts_file: Path
) -> None:
    full = estimate_run(run_config(models, prompts_file))
    assert full.activation_dtype == "bfloat16"  # bf16: null counts as on for the GPU a run is sized for
    assert full.activations.autocast_copies == 2 * (full.model("policy").total + full.model("value").total)
    lora = estimate_run(run_config(models, prompts_file, use_peft=True, dtype="bfloat16"))
    # A bfloat16 base needs no copy; only the float32 adapters and value head do.
    assert lora.activations.autocast_copies == 2 * (lora.model("policy").trainable + lora.model("value").trainable)
    float32 = estimate_run(run_config(models, prompts_file, bf16=False))
    assert (float32.activation_dtype, float32.activations.autocast_copies) == ("float32", 0)


def test_checkpointing_shrinks_the_update_not_the_weights(models: dict[str, Path], prompts_file: Path) -> None:
    plain = estimate_run(run_config(models, prompts_file))
    checkpointed = estimate_run(run_config(models, prompts_file, gradient_checkpointing=True))
    assert checkpointed.weight_bytes == plain.weight_bytes
    assert checkpointed.activations.policy_activations < plain.activations.policy_activations
    assert plain.peak_bytes == plain.weight_bytes + max(plain.activations.rollout, plain.activations.update)
    numbers = json.loads(json.dumps(plain.to_dict()))  # plain JSON, derived values included
    assert numbers["peak_bytes"] == plain.peak_bytes
    assert numbers["models"][0]["memory_bytes"] == plain.model("policy").memory_bytes
    assert numbers["tokens"]["tokens_per_update"] == plain.tokens.tokens_per_update


def test_cli_estimate_prints_a_table_and_writes_nothing(
    models: dict[str, Path], prompts_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config_file = tmp_path / "run.yaml"
    output = tmp_path / "out"
    config_file.write_text(yaml.safe_dump({**run_config(models, prompts_file).to_dict(), "output_dir": str(output)}))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # in this process (a new one would spend seconds importing), from an empty directory
    assert main(["train", str(config_file), "--estimate"]) == 0
    printed = capsys.readouterr().out
    for text in ("policy", "reference", "value", "reward", "peak", "tokens per update"):
        assert text in printed, printed
    assert not output.exists() and list(work.iterdir()) == []


@pytest.mark.parametrize("field", ["sft_model_path", "reward_model_path", "value_model_path"])
def test_a_bad_path_names_its_field(field: str, models: dict[str, Path], prompts_file: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"^{field}: "):
        estimate_run(run_config(models, prompts_file, **{field: str(tmp_path / "missing")}))


def test_cli_bad_policy_exits_2_with_one_line(
    models: dict[str, Path], prompts_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_file = tmp_path / "run.yaml"
    config_file.write_text(yaml.safe_dump({**run_config(models, prompts_file).to_dict(),
                                           "sft_model_path": str(tmp_path / "missing")}))
    assert main(["train", str(config_file), "--estimate", "--output", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("ppo-tune train: error: sft_model_path: ") and "\n" not in error, error
    assert not (tmp_path / "out").exists()
