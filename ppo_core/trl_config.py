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
        metadata=field_help("dtype the policy, reference and reward models load in; 'auto' takes the checkpoint's."),
    )
    attn_implementation: str | None = field(
        default=None,
        metadata=field_help("Attention kernel passed to from_pretrained, e.g. 'sdpa', 'eager' or 'flash_attention_2'."),
    )
    trust_remote_code: bool = field(
        default=False, metadata=field_help("Run modelling code shipped with a hub model; off unless you trust it.")
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
