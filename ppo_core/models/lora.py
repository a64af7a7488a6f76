"""A LoRA policy once built (``ppo_core.setup.trained_models`` adds the adapters): the reference as the policy with
its adapters switched off, trainable-parameter counts, and the adapter merged into a fresh base for saving."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from peft import PeftModel
from torch import nn
from transformers import AutoModelForCausalLM, PreTrainedModel

from ppo_core.models.loading import LoadOptions


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
