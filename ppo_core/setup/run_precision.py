"""The precision a CPU run computes in where its config leaves the choice open: bf16 where this CPU's bf16 products
are measured faster (``ppo_core.models.sampling_precision``), else float32.

TRL's two precision fields decide everything they set: ``bf16`` (autocast) and ``dtype`` (the frozen weights: the
reference, reward models and a LoRA policy's base). On a GPU, ``bf16: null`` already means "where the GPU supports
it". On a CPU the same null means "where this CPU runs bf16 products fast": the check that picks the sampling
copy's dtype, at the policy's own shapes, decides for the run too. Where it picks bf16, a run with ``bf16: null`` and
``dtype: float32`` (both defaults) runs as ``bf16: true, dtype: bfloat16``: frozen weights stored in bf16 and the
trained ones (a LoRA adapter, or the whole policy) kept in float32 as autocast's master copy. ``bf16: false`` keeps
a run in float32 on any CPU; ``dtype: bfloat16`` or ``bf16: true`` choose bf16 without the check.

Measured on SmolLM2-135M-Instruct with LoRA r 16, one thread (``python -m benchmarks.trial_speed``,
benchmarks/README.md): on an AMD EPYC with AVX-512 BF16 the bf16 update takes about half the float32 one's time; on
an AVX2-only EPYC bf16 products ran at a fiftieth of float32's, and the check keeps float32 there. Tiny models, whose
products are too small for either dtype to matter, stay in float32 unchecked
(``sampling_precision.MIN_CHECKED_WEIGHTS``).
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM

from ppo_core.config.ppo_config import PPOConfig
from ppo_core.models.sampling_precision import measured_sampling_dtype


def leaves_precision_open(config: PPOConfig, on_gpu: bool) -> bool:
    """Whether the check decides: a CPU run whose ``bf16`` is null and whose ``dtype`` is float32 (the defaults)."""
    return not on_gpu and config.bf16 is None and config.dtype == "float32"


def shapes_model(path: str, trust_remote_code: bool = False) -> nn.Module:
    """The causal LM at ``path`` built on the meta device: its layers' shapes, no weights read or allocated."""
    model_config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    with torch.device("meta"):
        model: nn.Module = AutoModelForCausalLM.from_config(model_config, trust_remote_code=trust_remote_code)
    return model


def with_run_precision(config: PPOConfig, policy_path: str, on_gpu: bool) -> PPOConfig:
    """``config`` with ``bf16: true, dtype: bfloat16`` where it leaves the precision open
    (:func:`leaves_precision_open`) and the check finds bf16 the faster at the shapes of the policy at
    ``policy_path`` (as it loads: ``ppo_core.setup.run_setup.run_sources``) and the rollout's rows; else ``config``
    itself."""
    if not leaves_precision_open(config, on_gpu):
        return config
    rows = min(config.local_rollout_forward_batch_size, config.local_batch_size)
    try:
        shapes = shapes_model(policy_path, config.trust_remote_code)
    except (OSError, ValueError):  # no model there: loading it names the field and the problem in one line
        return config
    choice = measured_sampling_dtype(shapes, rows)
    if choice.dtype != "bfloat16":
        return config
    return dataclasses.replace(config, bf16=True, dtype="bfloat16")


__all__ = ["leaves_precision_open", "shapes_model", "with_run_precision"]
