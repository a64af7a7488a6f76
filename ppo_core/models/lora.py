"""LoRA through peft, configured with TRL ModelConfig's names: the policy's adapter, the value trunk's adapter,
the reference as the policy with its adapters switched off, and trainable-parameter counts."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from peft import LoraConfig, PeftModel, get_peft_model
from torch import nn
from transformers import AutoModelForCausalLM, PreTrainedModel

from ppo_core.config.ppo_config import ConfigError, PPOConfig
from ppo_core.errors import first_line
from ppo_core.models.loading import LoadOptions


def lora_config(config: PPOConfig, task_type: str | None) -> LoraConfig:
    """peft's LoraConfig from the run's lora_* fields, as TRL's ``get_peft_config`` builds it.

    ``task_type`` is the policy's ``lora_task_type``, or None for a bare trunk (the value network's).
    """
    targets: list[str] | str | None = config.lora_target_modules
    if targets is not None and len(targets) == 1:
        targets = targets[0]  # peft reads the string "all-linear" as a keyword, a one-item list as a module name
    return LoraConfig(
        task_type=task_type, r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
        target_modules=targets, target_parameters=config.lora_target_parameters,
        modules_to_save=config.lora_modules_to_save, use_rslora=config.use_rslora, use_dora=config.use_dora,
        bias="none",
    )


def add_adapter(model: PreTrainedModel, config: PPOConfig, task_type: str | None,
                field_name: str) -> PreTrainedModel:
    """``model`` frozen, with a trainable LoRA adapter; a target that matches nothing is the user's error.

    Typed as the model it wraps: a PeftModel forwards, generates and saves through the same calls.
    """
    try:
        with warnings.catch_warnings():
            # Two warnings peft prints for every adapter, about its own code, that a user can do nothing about: on
            # GPT-2's Conv1D layers it sets fan_in_fan_out itself, and it reads transformers 5's deprecated
            # is_gradient_checkpointing. A study printed both for every trial.
            warnings.filterwarnings("ignore", message=r"fan_in_fan_out is set to False", category=UserWarning)
            warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated",
                                    category=FutureWarning)
            return cast(PreTrainedModel, get_peft_model(model, lora_config(config, task_type)))
    except (ValueError, KeyError) as error:
        raise ConfigError(f"{field_name}: cannot add a LoRA adapter to {model.config.model_type!r} "
                          f"({first_line(error)})") from None


@contextmanager
def adapters_disabled(model: PreTrainedModel) -> Iterator[PreTrainedModel]:
    """``model`` as it was before training: a LoRA policy with its adapters off is the reference policy."""
    if isinstance(model, PeftModel):
        with model.disable_adapter():
            yield model
    else:
        yield model


@dataclass(frozen=True)
class ParameterCount:
    trainable: int
    total: int

    @property
    def fraction(self) -> float:
        return self.trainable / max(self.total, 1)

    def __str__(self) -> str:
        return f"{self.trainable:,} of {self.total:,} parameters trainable ({100 * self.fraction:.2f}%)"


def count_parameters(model: nn.Module) -> ParameterCount:
    parameters = list(model.parameters())
    return ParameterCount(sum(p.numel() for p in parameters if p.requires_grad), sum(p.numel() for p in parameters))


def save_merged(base_path: str, adapter_dir: Path, options: LoadOptions, directory: Path) -> Path:
    """Load the base as its checkpoint stores it, merge the saved adapter into its weights, save the result.

    A fresh base rather than the trained one: under dtype bfloat16 the run's frozen base may be lower precision
    than the checkpoint, and merging would write that rounding into every weight.
    """
    base = AutoModelForCausalLM.from_pretrained(
        base_path, **{**options.from_pretrained_kwargs(), "dtype": "auto"}
    )
    merged = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
    merged.save_pretrained(directory)
    return directory
