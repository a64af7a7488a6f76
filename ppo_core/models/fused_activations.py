"""Torch's fused kernel for the tanh GELU that GPT-2-family models compute op by op.

transformers' ``gelu_new`` (GPT-2, GPT-J, CodeGen...) and ``gelu_fast`` write the tanh approximation of GELU as seven
elementwise ops, each a kernel that keeps its input for the backward pass. ``torch.nn.GELU(approximate="tanh")`` is
the same formula in one forward and one backward kernel: fewer passes over the MLP's widest activation and fewer
tensors held for the backward. The swap is of modules only; the model's config, and so what ``save_pretrained``
writes, keeps its own activation name.
"""

from __future__ import annotations

from typing import TypeVar

from torch import nn
from transformers.activations import FastGELUActivation, NewGELUActivation

ModuleT = TypeVar("ModuleT", bound=nn.Module)

# Both compute GELU_tanh(x) = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))); gelu_fast rounds √(2/π) to 10 digits.
UNFUSED_TANH_GELUS: tuple[type[nn.Module], ...] = (NewGELUActivation, FastGELUActivation)


def fuse_activations(model: ModuleT) -> ModuleT:
    """Replace every op-by-op tanh GELU in ``model`` with ``nn.GELU(approximate="tanh")``, in place.

    GELU_tanh(x) = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), in one kernel; values agree to float rounding.
    """
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, UNFUSED_TANH_GELUS):
                setattr(parent, name, nn.GELU(approximate="tanh"))
    return model
