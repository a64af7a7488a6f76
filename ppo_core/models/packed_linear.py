"""Linear layers whose weights are packed once into oneDNN's blocked layout, for a CPU's decode steps.

``nn.functional.linear`` on a CPU reorders its weight into the kernel's blocked layout on every call: decoding a few
rows, each step then reads every weight, writes it again reordered and reads that, where the product itself needs
one read. A frozen weight can be reordered once (``torch.ops.mkldnn._reorder_linear_weight``, as torch's inductor
does for frozen graphs) and every later product reads the packed copy alone. On SmolLM2-135M at 8 rows, one thread,
an AMD EPYC with AVX-512 BF16: a decode step in bf16 took 26 ms packed against 36 ms, in fp32 46-57 against 75-101
(a loaded machine; bf16 logits equal, fp32's within 1e-3 from another summation order). Where oneDNN cannot pack a
dtype, layers stay as they were (:func:`pack_weight` returns None).
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn


def pack_weight(weight: torch.Tensor, rows: int) -> torch.Tensor | None:
    """``weight`` (out x in) reordered for products with about ``rows`` input rows, or None where this torch build
    or CPU has no oneDNN kernel for its dtype."""
    if not torch.backends.mkldnn.is_available():
        return None
    if weight.dtype == torch.bfloat16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return None
    try:
        return cast(torch.Tensor, torch.ops.mkldnn._reorder_linear_weight(weight.detach(), rows))
    except (RuntimeError, AttributeError):
        return None


def packed_product(inputs: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x W^T + b with W packed by :func:`pack_weight`."""
    return cast(torch.Tensor, torch.ops.mkldnn._linear_pointwise(inputs, packed, bias, "none", [], ""))


class PackedLinear(nn.Module):
    """``linear`` computing from its packed weight; :meth:`repack` after its weight changes."""

    def __init__(self, linear: nn.Linear, packed: torch.Tensor, rows: int) -> None:
        super().__init__()
        self.linear = linear  # keeps the plain weight: what a refresh writes, and a tied embedding reads
        self.packed = packed
        self.rows = rows

    @property
    def weight(self) -> torch.Tensor:
        """The plain weight, for code that reads a layer's ``weight`` (a tied head, dtype checks)."""
        return self.linear.weight

    def repack(self) -> None:
        packed = pack_weight(self.linear.weight, self.rows)
        assert packed is not None  # the same weight's dtype packed at construction
        self.packed = packed

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        # Autocast does not reach this op; under a bf16 run's autocast the input may come in bf16 from a product
        # autocast did reach, and oneDNN multiplies only like dtypes.
        return packed_product(inputs.to(self.linear.weight.dtype), self.packed, self.linear.bias)


def pack_linears(model: nn.Module, rows: int) -> list[PackedLinear]:
    """Replace, in place, every ``nn.Linear`` of a frozen ``model`` by a :class:`PackedLinear`; the packed layers
    (none where oneDNN cannot pack the weights' dtype)."""
    packed_layers: list[PackedLinear] = []
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:  # subclasses (LoRA's, quantised layers) compute something else
                packed = pack_weight(child.weight, rows)
                if packed is None:
                    return packed_layers
                layer = PackedLinear(child, packed, rows)
                setattr(parent, name, layer)
                packed_layers.append(layer)
    return packed_layers


__all__ = ["PackedLinear", "pack_linears", "pack_weight", "packed_product"]
