"""A bf16 copy of the policy that samples the rollout's responses on a GPU (``bf16_generation_copy``).

Decoding reads every weight once per token: from a bf16 copy it reads half the bytes of the float32 master weights
the optimizer updates, and runs bf16 kernels without autocast's per-step casts. The copy is refreshed from the master
weights after each update's optimizer steps, so every rollout samples from the policy as trained so far, rounded to
bf16. Only the sampling moves to the copy: the rollout's log-probabilities still come from the full scoring forward
of the master policy, so PPO's ratios are unchanged.
"""

from __future__ import annotations

import copy

import torch
from transformers import PreTrainedModel

from ppo_core.config.ppo_config import PPOConfig


class GenerationCopy:
    """``model``: the policy in bf16, frozen, in eval mode; :meth:`refresh` copies the master's trained weights in."""

    def __init__(self, policy: PreTrainedModel) -> None:
        self.model: PreTrainedModel = copy.deepcopy(policy)
        torch.nn.Module.to(self.model, torch.bfloat16)  # transformers' typing of .to hides Module's dtype form
        self.model.eval().requires_grad_(False)
        # The same module tree, so the same parameter order; frozen weights (a LoRA's base) never change.
        self._trained = [(mine, master) for mine, master in zip(self.model.parameters(), policy.parameters(),
                                                                 strict=True) if master.requires_grad]

    @torch.no_grad()
    def refresh(self) -> None:
        """w_copy = bf16(w_master) for every trained weight (``copy_`` rounds to nearest even, as ``.to`` does)."""
        for mine, master in self._trained:
            mine.copy_(master)


def generation_copy(config: PPOConfig, policy: PreTrainedModel, device: torch.device) -> GenerationCopy | None:
    """The copy when ``bf16_generation_copy`` is on and the policy runs on a CUDA device; None (sample from the
    master policy, today's path) otherwise."""
    if config.bf16_generation_copy and device.type == "cuda":
        return GenerationCopy(policy)
    return None


__all__ = ["GenerationCopy", "generation_copy"]
