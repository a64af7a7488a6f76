"""Which scaled-dot-product attention kernel the forwards behind the PPO ratio run: on a CPU in bfloat16, over
short sequences, torch's math kernel rather than its flash kernel.

torch's CPU flash kernel computes its backward in bf16 slowly: one SmolLM2 layer's attention forward and backward
([8 rows, 9 heads, 19 tokens, 64 dims], causal) took 5.4 ms in bf16 against 1.35 ms by the math kernel (1.04 and
1.68 ms in float32, where flash stays faster), and a whole forward and backward of the SmolLM2 study's LoRA policy
under bf16 autocast 0.755 s against 0.663 s (one thread, an AMD EPYC of family 25, Zen 4; scripts outside the
repository). The math kernel materialises each head's T x T scores, so past a few hundred tokens flash is faster
again (at 512 tokens 235 ms against 426 ms for 8 rows): the switch holds only up to ``MATH_MAX_TOKENS``.

The rollout's scoring forwards run under the same rule as the update's, so that a policy's first ratio divides
log-probabilities of one kernel by log-probabilities of the same kernel; a held-out evaluation keeps torch's own
choice (its no-grad forwards of 64 rows ran 3.0 ms a layer by flash, 9.8 ms by math).

Example::

    with ratio_attention(attention_dtype(model, device), device, tokens=queries.shape[1] + responses.shape[1]):
        logits = scoring_logits(model, ...)
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

MATH_MAX_TOKENS = 128
"""The longest sequence the math kernel runs: at 128 tokens its bf16 forward and backward took 27 ms against
flash's 51 (8 rows, 9 heads); at 512, 426 against 235."""


def prefers_math_attention(device_type: str, dtype: torch.dtype, tokens: int) -> bool:
    """Whether attention over ``tokens`` positions computed in ``dtype`` on ``device_type`` runs the math kernel:
    on a CPU, in bfloat16, for T <= MATH_MAX_TOKENS.

    >>> prefers_math_attention("cpu", torch.bfloat16, 19), prefers_math_attention("cpu", torch.float32, 19)
    (True, False)
    >>> prefers_math_attention("cuda", torch.bfloat16, 19), prefers_math_attention("cpu", torch.bfloat16, 512)
    (False, False)
    """
    return device_type == "cpu" and dtype == torch.bfloat16 and tokens <= MATH_MAX_TOKENS


def attention_dtype(model: torch.nn.Module, device: torch.device, mixed_precision: str = "no") -> torch.dtype:
    """The dtype attention computes in: bf16 under accelerate's ``mixed_precision`` "bf16" (whose prepared model
    autocasts inside its own forward), else autocast's where it is on for ``device``, else the model's weights'."""
    if mixed_precision == "bf16":
        return torch.bfloat16
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return next(model.parameters()).dtype


def ratio_attention(dtype: torch.dtype, device: torch.device, tokens: int) -> AbstractContextManager[object]:
    """The attention kernels for a forward (and its backward) whose log-probabilities meet in the PPO ratio: the math
    kernel where :func:`prefers_math_attention`, else torch's own choice."""
    if prefers_math_attention(device.type, dtype, tokens):
        return sdpa_kernel([SDPBackend.MATH])
    return contextlib.nullcontext()


__all__ = ["MATH_MAX_TOKENS", "attention_dtype", "prefers_math_attention", "ratio_attention"]
