"""The PPO update: epochs x shuffled mini-batches x micro-batches with gradient accumulation."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch
from accelerate import Accelerator
from transformers import PreTrainedModel

from ppo_core.losses import clipped_policy_loss, clipped_value_loss, entropy_from_logits
from ppo_core.masked import masked_mean
from ppo_core.models import ValueModel
from ppo_core.rollout import Rollout, response_logits, response_values
from ppo_core.sequences import token_logprobs


@dataclass
class UpdateSettings:
    num_ppo_epochs: int
    local_mini_batch_size: int
    per_device_train_batch_size: int
    cliprange: float
    cliprange_value: float
    vf_coef: float
    entropy_coef: float
    temperature: float
    max_grad_norm: float


@dataclass
class Optimisation:
    """The two networks and their optimizers; the policy and value are separate, with separate rates."""

    accelerator: Accelerator
    policy: PreTrainedModel
    value_model: ValueModel
    policy_optimizer: torch.optim.Optimizer
    value_optimizer: torch.optim.Optimizer


class StatsAccumulator:
    """True averages over every micro-batch of every mini-batch and epoch (TRL 1.12 divided by the wrong count)."""

    def __init__(self) -> None:
        self.values: dict[str, list[torch.Tensor]] = defaultdict(list)
        self.ratio_sum = torch.zeros(())
        self.ratio_square_sum = torch.zeros(())
        self.token_count = torch.zeros(())

    def add(self, name: str, value: torch.Tensor) -> None:
        self.values[name].append(value.detach().float().cpu())

    def add_ratios(self, ratio: torch.Tensor, mask: torch.Tensor) -> None:
        valid = ratio.detach().float()[mask.bool()].cpu()
        self.ratio_sum += valid.sum()
        self.ratio_square_sum += (valid**2).sum()
        self.token_count += valid.numel()

    def summary(self) -> dict[str, float]:
        means = {name: float(torch.stack(values).mean()) for name, values in self.values.items()}
        count = max(float(self.token_count), 1.0)
        ratio_mean = float(self.ratio_sum) / count
        means["val/ratio"] = ratio_mean
        means["val/ratio_var"] = max(float(self.ratio_square_sum) / count - ratio_mean**2, 0.0)
        return means


def ppo_update(
    rollout: Rollout,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    optimisation: Optimisation,
    settings: UpdateSettings,
    generator: torch.Generator,
) -> dict[str, float]:
    """Optimise the clipped PPO objective on one rollout batch; returns the averaged diagnostics."""
    stats = StatsAccumulator()
    batch_size = rollout.responses.shape[0]
    micro_batches_per_step = settings.local_mini_batch_size // settings.per_device_train_batch_size
    optimisation.policy.train(False)  # dropout stays off: eval mode is deliberate while training
    for _epoch in range(settings.num_ppo_epochs):
        order = torch.randperm(batch_size, generator=generator).to(rollout.responses.device)
        for mini_start in range(0, batch_size, settings.local_mini_batch_size):
            mini_indices = order[mini_start : mini_start + settings.local_mini_batch_size]
            for micro_start in range(0, len(mini_indices), settings.per_device_train_batch_size):
                micro_indices = mini_indices[micro_start : micro_start + settings.per_device_train_batch_size]
                loss = _micro_batch_loss(rollout, advantages, returns, micro_indices, optimisation, settings, stats)
                optimisation.accelerator.backward(loss / micro_batches_per_step)
            _optimizer_step(optimisation, settings.max_grad_norm)
    return stats.summary()


def _micro_batch_loss(
    rollout: Rollout,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    rows: torch.Tensor,
    optimisation: Optimisation,
    settings: UpdateSettings,
    stats: StatsAccumulator,
) -> torch.Tensor:
    queries, query_mask = rollout.queries[rows], rollout.query_mask[rows]
    responses, mask = rollout.responses[rows], rollout.response_mask[rows]
    logits = response_logits(optimisation.policy, queries, query_mask, responses, mask)
    logprobs = token_logprobs(logits, responses, settings.temperature)
    entropy = masked_mean(entropy_from_logits(logits.float() / settings.temperature), mask)
    values = response_values(optimisation.value_model, queries, query_mask, responses, mask)

    policy_out = clipped_policy_loss(logprobs, rollout.logprobs[rows], advantages[rows], mask, settings.cliprange)
    value_loss, value_clipfrac = clipped_value_loss(
        values, rollout.values[rows], returns[rows], mask, settings.cliprange_value
    )
    stats.add("policy/approxkl_avg", policy_out.approxkl)
    stats.add("policy/clipfrac_avg", policy_out.clipfrac)
    stats.add("loss/policy_avg", policy_out.loss)
    stats.add("loss/value_avg", value_loss)
    stats.add("val/clipfrac_avg", value_clipfrac)
    stats.add("policy/entropy_avg", entropy)
    stats.add_ratios(policy_out.ratio, mask)
    return policy_out.loss - settings.entropy_coef * entropy + settings.vf_coef * value_loss


def _optimizer_step(optimisation: Optimisation, max_grad_norm: float) -> None:
    accelerator = optimisation.accelerator
    if max_grad_norm > 0:
        accelerator.clip_grad_norm_(optimisation.policy.parameters(), max_grad_norm)
        accelerator.clip_grad_norm_(optimisation.value_model.parameters(), max_grad_norm)
    optimisation.policy_optimizer.step()
    optimisation.value_optimizer.step()
    optimisation.policy_optimizer.zero_grad(set_to_none=True)
    optimisation.value_optimizer.zero_grad(set_to_none=True)
