"""LoRA through peft, configured with TRL ModelConfig's names: the policy's adapter, the value trunk's adapter,
the reference as the policy with its adapters switched off, and trainable-parameter counts."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from peft import LoraConfig, PeftModel, get_peft_model
from torch import nn
from transformers import PreTrainedModel

from ppo_core.config import ConfigError, PPOConfig
from ppo_core.errors import first_line


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


def add_adapter(model: PreTrainedModel, config: PPOConfig, task_type: str | None, field_name: str) -> PeftModel:
    """``model`` frozen, with a trainable LoRA adapter; a target that matches nothing is the user's error."""
    try:
        return get_peft_model(model, lora_config(config, task_type))
    except (ValueError, KeyError) as error:
        raise ConfigError(f"{field_name}: cannot add a LoRA adapter to {model.config.model_type!r} "
                          f"({first_line(error)})") from None


@contextmanager
def adapters_disabled(model: nn.Module) -> Iterator[nn.Module]:
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
