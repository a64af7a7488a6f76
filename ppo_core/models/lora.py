"""A loaded model made ready to train (gradient checkpointing, a LoRA adapter through peft configured with TRL
ModelConfig's names, dropout off), the reference as the policy with its adapters switched off, and
trainable-parameter counts."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast

from peft import LoraConfig, PeftModel, get_peft_model
from torch import nn
from transformers import AutoModelForCausalLM, PreTrainedModel

from ppo_core.config.ppo_config import ConfigError, PPOConfig
from ppo_core.errors import first_line
from ppo_core.models.loading import LoadOptions

ModuleT = TypeVar("ModuleT", bound=nn.Module)


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


def prepare_for_training(model: PreTrainedModel, adapter: LoraConfig | None, gradient_checkpointing: bool,
                         field_name: str) -> PreTrainedModel:
    """``model`` as a run trains it: with gradient checkpointing where asked, under ``adapter`` where one is given
    (the model then frozen), and with every dropout zeroed, the adapter's own included (:func:`without_dropout`)."""
    if gradient_checkpointing:
        enable_gradient_checkpointing(model)
    if adapter is not None:
        model = add_adapter(model, adapter, field_name)
    return without_dropout(model)


def add_adapter(model: PreTrainedModel, adapter: LoraConfig, field_name: str) -> PreTrainedModel:
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
            return cast(PreTrainedModel, get_peft_model(model, adapter))
    except (ValueError, KeyError) as error:
        raise ConfigError(f"{field_name}: cannot add a LoRA adapter to {model.config.model_type!r} "
                          f"({first_line(error)})") from None


def without_dropout(model: ModuleT) -> ModuleT:
    """Zero every dropout of a model that trains, so training mode (which gradient checkpointing needs) computes
    what eval mode does: the update's log-probabilities must match the rollout's for the first ratio to be 1."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
        # Attention kernels take their dropout as a float attribute (Llama, Qwen2, GPT-NeoX), not a module.
        if isinstance(getattr(module, "attention_dropout", None), float):
            setattr(module, "attention_dropout", 0.0)  # noqa: B010  # mypy types Module attributes as tensors
    return model


def enable_gradient_checkpointing(model: PreTrainedModel) -> None:
    """Recompute each layer's activations in the backward pass. The non-reentrant kind needs no gradient on the
    inputs, so it works under a frozen LoRA base; it takes effect only while the model is in training mode."""
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


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
