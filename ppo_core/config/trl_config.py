"""TRL's ScriptArguments (the dataset) and ModelConfig (how models load), under TRL's own names.

PPOConfig inherits both, so one flat YAML file, ``--set key=value`` and ``HfArgumentParser(PPOConfig)`` take
every field, as TRL's own YAML configs spread keys over ``(ScriptArguments, PPOConfig, ModelConfig)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


def field_help(text: str) -> dict[str, str]:
    """A dataclass field's metadata, as HfArgumentParser reads its help text."""
    return {"help": text}


@dataclass
class ModelConfig:
    """How the policy, reference and reward models are loaded (TRL ModelConfig's names and defaults)."""

    model_revision: str = field(
        default="main", metadata=field_help("Branch, tag or commit of hub models (ignored for local directories).")
    )
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = field(
        default="float32",
        metadata=field_help("dtype of the frozen weights (reference, reward models, a LoRA policy's base); 'auto' "
                            "takes the checkpoint's. Trained weights stay float32 under bf16 autocast."),
    )
    attn_implementation: str | None = field(
        default=None,
        metadata=field_help("Attention kernel passed to from_pretrained, e.g. 'sdpa', 'eager' or 'flash_attention_2'."),
    )
    trust_remote_code: bool = field(
        default=False, metadata=field_help("Run modelling code shipped with a hub model; off unless you trust it.")
    )
    use_peft: bool = field(
        default=False,
        metadata=field_help("Train LoRA adapters instead of the whole policy; the reference is then the same base "
                            "model with its adapters disabled, not a second copy."),
    )
    lora_r: int = field(default=16, metadata=field_help("LoRA rank."))
    lora_alpha: int = field(default=32, metadata=field_help("LoRA alpha: adapters are scaled by lora_alpha / lora_r."))
    lora_dropout: float = field(
        default=0.05,
        metadata=field_help("LoRA dropout, passed to peft; PPO keeps every dropout off while it trains (the ratio "
                            "must compare like with like), so it only matters to a later fine-tune of the adapter."),
    )
    lora_target_modules: list[str] | None = field(
        default=None,
        metadata=field_help("Modules that get adapters, e.g. q_proj,v_proj or all-linear; null takes peft's default "
                            "for the architecture."),
    )
    lora_target_parameters: list[str] | None = field(
        default=None, metadata=field_help("Parameters (not modules) that get adapters, e.g. MoE expert weights.")
    )
    lora_modules_to_save: list[str] | None = field(
        default=None, metadata=field_help("Modules trained in full next to the adapters, e.g. lm_head.")
    )
    lora_task_type: str = field(default="CAUSAL_LM", metadata=field_help("peft task type of the policy's adapter."))
    use_rslora: bool = field(
        default=False, metadata=field_help("Rank-stabilised LoRA: scale adapters by lora_alpha / sqrt(lora_r).")
    )
    use_dora: bool = field(
        default=False, metadata=field_help("Weight-decomposed LoRA (DoRA): slower steps, sometimes better at low rank.")
    )


@dataclass
class ScriptArguments:
    """Where the prompts come from (TRL ScriptArguments' names and defaults)."""

    dataset_name: str | None = field(
        default=None,
        metadata=field_help(
            "Prompt dataset: a hub name, a directory datasets.load_dataset reads or save_to_disk wrote, or one "
            ".jsonl, .json, .csv, .parquet or .txt (one prompt per line) file. Prompts are its 'prompt' column, "
            "text or a list of {role, content} messages. Default: the built-in task's prompts."
        ),
    )
    dataset_config: str | None = field(
        default=None, metadata=field_help("Configuration (subset) name of a hub dataset.")
    )
    dataset_train_split: str = field(default="train", metadata=field_help("Split the training prompts come from."))
    dataset_test_split: str = field(
        default="test",
        metadata=field_help("Split of the evaluation prompts when the dataset has it; else the first training ones."),
    )
