"""The policy as one plain model in the sampling dtype, its LoRA adapters merged into its weights: what the rollout
samples responses from on a CPU (``sampling_dtype``).

Decoding a few rows reads every weight once per token. Through an unmerged LoRA policy each adapted linear layer runs
its base product plus two rank-r products and an add at every step; merged, one product, from a weight packed once
for oneDNN's kernels (``ppo_core.models.packed_linear``). In bf16, where the CPU runs bf16 products faster
(``ppo_core.models.sampling_precision``), each step also reads half the bytes. A decode step's attention runs as
two products per key/value head (``ppo_core.models.decode_attention``), where SDPA's CPU flash kernel was slow. A
Llama-family model instead samples through few operations from joined weights, packed once per refresh
(``ppo_core.rollout.fused_decode``, ``fused_decode``), its prompts' prefill included; its own layers then stay
unpacked. The copy is refreshed from the policy after each update, so every rollout samples from the policy as
trained so far (rounded to the copy's dtype). Only the sampling moves to the copy: the rollout's log-probabilities
still come from the policy's own scoring forward, so PPO's ratios are exact whatever the copy's dtype.
"""

from __future__ import annotations

import copy
from typing import cast

import torch
from peft import PeftModel
from peft.tuners.lora import Linear as LoraLinear
from torch import nn
from transformers import PreTrainedModel

from ppo_core.config.ppo_config import PPOConfig
from ppo_core.models.decode_attention import use_decode_attention
from ppo_core.models.packed_linear import PackedLinear, pack_linears
from ppo_core.models.sampling_precision import DTYPES, measured_sampling_dtype
from ppo_core.rollout.decode_choice import measured_fused_decode
from ppo_core.rollout.fused_decode import FusedDecoder, decodable, fused_decoder

ADAPTER = "default"  # the one adapter ppo_core.models.lora adds
LORA_WEIGHTS = ("lora_A", "lora_B")


def is_plain_lora(module: nn.Module, tied: torch.Tensor | None) -> bool:
    """A LoRA layer whose merge is W + s B A alone: a linear (or GPT-2 Conv1D) layer with no DoRA or other variant,
    no LoRA bias, and a base weight of its own (merged into a weight tied to the input embeddings, the copy's
    embeddings would move too, and the policy's do not)."""
    if not isinstance(module, LoraLinear):
        return False
    variant = ADAPTER in getattr(module, "lora_variant", {}) or getattr(module, "use_dora", {}).get(ADAPTER, False)
    bias = getattr(module, "lora_bias", {}).get(ADAPTER, False)
    return not variant and not bias and module.get_base_layer().weight is not tied


def mergeable(policy: PreTrainedModel) -> bool:
    """Whether the copy can follow ``policy``: a plain model, or a LoRA whose every trained weight belongs to a plain
    LoRA layer (:func:`is_plain_lora`). Embedding adapters, modules_to_save, DoRA and adapted parameters are not."""
    if not isinstance(policy, PeftModel):
        return True
    tied = policy.get_input_embeddings().weight
    layers = [module for module in policy.modules() if hasattr(module, "lora_A")]
    if not all(is_plain_lora(module, tied) for module in layers):
        return False
    return all(any(part in name.split(".") for part in LORA_WEIGHTS)
               for name, parameter in policy.named_parameters() if parameter.requires_grad)


class SamplingCopy:
    """``model``: the policy with its adapters merged, in ``dtype``, frozen, in eval mode. Where ``fused`` and the
    architecture allow (:func:`ppo_core.rollout.fused_decode.decodable`), a
    :class:`ppo_core.rollout.fused_decode.FusedDecoder` of it (``decoder``) that the sampling loop runs; else its
    linear layers packed for products of about ``rows`` rows (``ppo_core.models.packed_linear``) and its decode
    steps' attention ``ppo_core.models.decode_attention``'s where it was SDPA's (``decode_attention``).
    :meth:`refresh` writes the policy's trained weights in. ``policy`` must be :func:`mergeable`. ``frozen``: a
    copy that never follows ``policy`` (a reference): its adapters removed, not merged, and nothing to refresh."""

    def __init__(self, policy: PreTrainedModel, dtype: torch.dtype, rows: int, fused: bool = True,
                 frozen: bool = False) -> None:
        self._lora: list[tuple[nn.Module, LoraLinear]] = []
        self._trained: list[tuple[torch.Tensor, torch.Tensor]] = []
        if isinstance(policy, PeftModel):
            merged = copy.deepcopy(policy)
            merged = merged.unload() if frozen else merged.merge_and_unload()
        else:
            merged = copy.deepcopy(policy)
            self._trained = [] if frozen else [
                (mine, master) for mine, master in zip(merged.parameters(), policy.parameters(), strict=True)
                if master.requires_grad]
        # Parameters only: buffers such as rotary frequencies stay float32, as from_pretrained in bf16 keeps them.
        for parameter in merged.parameters():
            parameter.data = parameter.data.to(dtype)
        self.model: PreTrainedModel = merged.eval().requires_grad_(False)
        self.dtype, self.rows, self.fused = dtype, rows, fused
        self.decode_attention = use_decode_attention(self.model)
        # A model the fused decoder runs needs no packed layers of its own: the decoder packs the weights it joins.
        fused = fused and decodable(self.model)
        self._packed = [] if fused else pack_linears(self.model, rows)
        self.decoder: FusedDecoder | None = None
        if isinstance(policy, PeftModel) and not frozen:
            # Each adapted layer of the copy beside the policy's layer it follows: the same module paths.
            self._lora = [(self.model.get_submodule(name), module)
                          for name, module in policy.get_base_model().named_modules()
                          if isinstance(module, LoraLinear)]
        self.refresh()  # one rounding rule from the start: peft's own merge adds in the base's dtype
        self.decoder = fused_decoder(self.model, rows) if fused else None  # joins and packs the merged weights

    @torch.no_grad()
    def refresh(self) -> None:
        """W_copy = round(W_base + s B A) for each adapted layer, summed in float32 and rounded once to the copy's
        dtype; w_copy = round(w) for every other trained weight; then the changed layers packed again (by the
        decoder, where there is one)."""
        for mine, layer in self._lora:
            base = cast(torch.Tensor, layer.get_base_layer().weight)
            merged = base.float() + layer.get_delta_weight(ADAPTER).float()
            target = mine.linear if isinstance(mine, PackedLinear) else mine
            target.weight.copy_(merged)  # type: ignore[operator]  # a Linear's or Conv1D's weight
            if isinstance(mine, PackedLinear):
                mine.repack()
        for mine_parameter, master in self._trained:
            mine_parameter.copy_(master)
        if self._trained:  # a fully trained policy: every layer may have moved
            for packed in self._packed:
                packed.repack()
        if self.decoder is not None:
            self.decoder.refresh()


def sampling_copy(config: PPOConfig, policy: PreTrainedModel, device: torch.device) -> SamplingCopy | None:
    """The copy the rollout samples from on a CPU, in ``sampling_dtype`` (auto: the dtype
    :func:`ppo_core.models.sampling_precision.measured_sampling_dtype` picks for the rollout's rows), decoding fused
    where ``fused_decode`` says so (null: where :func:`ppo_core.rollout.decode_choice.measured_fused_decode` finds it
    faster). None, to sample
    from the policy itself: on a GPU, where the copy cannot follow the policy (:func:`mergeable`), and where it would
    equal the policy (no adapter to merge, and the policy's dtype already)."""
    if device.type != "cpu" or not mergeable(policy):
        return None
    rows = min(config.local_rollout_forward_batch_size, config.local_batch_size)
    dtype = DTYPES[config.sampling_dtype] if config.sampling_dtype != "auto" else \
        measured_sampling_dtype(policy, rows).torch_dtype
    if not isinstance(policy, PeftModel) and policy.dtype == dtype:
        return None
    fused = config.fused_decode
    if fused is None:  # the check builds both copies, frozen, for itself alone
        fused = measured_fused_decode(
            policy, dtype, rows, lambda decode_fused: SamplingCopy(policy, dtype, rows, decode_fused, True).model).fused
    return SamplingCopy(policy, dtype, rows, fused)


def reference_copy(config: PPOConfig, policy: PreTrainedModel, reference: PreTrainedModel | None,
                   sampler: SamplingCopy | None) -> SamplingCopy | None:
    """The reference made as ``sampler`` was made from the policy (the same dtype, packing rows and decoder), for a
    held-out evaluation to step beside the sampler (``eval_logprobs_from_sampling``): ``reference`` itself, or
    where it is None (a LoRA policy's reference is its base) the policy with its adapters removed. Never refreshed:
    the reference is frozen. None where there is no sampler to match, or the switch is off."""
    if sampler is None or not config.eval_logprobs_from_sampling:
        return None
    base = reference if reference is not None else policy if isinstance(policy, PeftModel) else None
    return None if base is None else SamplingCopy(base, sampler.dtype, sampler.rows, sampler.fused, frozen=True)


__all__ = ["SamplingCopy", "is_plain_lora", "mergeable", "reference_copy", "sampling_copy"]
