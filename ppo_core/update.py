"""The PPO update: epochs x shuffled mini-batches x micro-batches with gradient accumulation."""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import torch
from accelerate import Accelerator
from transformers import PreTrainedModel

from ppo_core.config import PPOConfig
from ppo_core.losses import clipped_policy_loss, clipped_value_loss, entropy_from_log_probs
from ppo_core.masked import local, masked_mean
from ppo_core.models import ValueModel
from ppo_core.rollout import Rollout, response_logits, response_values


@dataclass
class Optimisation:
    """The two networks and their optimizers; the policy and value are separate, with separate rates."""

    accelerator: Accelerator
    policy: PreTrainedModel
    value_model: ValueModel
    policy_optimizer: torch.optim.Optimizer
    value_optimizer: torch.optim.Optimizer


class StatsAccumulator:
    """True averages over every micro-batch of every mini-batch and epoch (TRL 1.12 divided by the wrong count).

    Sums stay on the device; reading them once at the end avoids a GPU sync per micro-batch.
    """

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, int] = defaultdict(int)
        self.ratio_sums: torch.Tensor | None = None  # [sum r, sum r^2, token count]

    def add(self, name: str, value: torch.Tensor) -> None:
        value = value.detach().float()
        self.sums[name] = self.sums[name] + value if name in self.sums else value
        self.counts[name] += 1

    def add_ratios(self, ratio: torch.Tensor, mask: torch.Tensor) -> None:
        valid = mask.bool()
        ratio = torch.where(valid, ratio.detach().float(), torch.zeros_like(ratio, dtype=torch.float32))
        sums = torch.stack([ratio.sum(), (ratio**2).sum(), valid.sum().float()])
        self.ratio_sums = sums if self.ratio_sums is None else self.ratio_sums + sums

    def summary(self, total: Callable[[torch.Tensor], torch.Tensor] = local) -> dict[str, float]:
        """Means over every micro-batch of every rank: ``total`` sums the sums and the counts over ranks."""
        names = list(self.sums)
        device = next(iter(self.sums.values())).device if names else torch.device("cpu")
        counts = torch.tensor([float(self.counts[name]) for name in names], device=device)
        ratio_sums = self.ratio_sums if self.ratio_sums is not None else torch.zeros(3, device=device)
        # One reduction for everything: [sums..., counts..., ratio sums].
        packed = total(torch.cat([torch.stack([self.sums[name] for name in names]) if names else counts, counts,
                                  ratio_sums.to(device)])).cpu().tolist()
        sums, totals_of_counts = packed[: len(names)], packed[len(names) : 2 * len(names)]
        means = {name: value / count for name, value, count in zip(names, sums, totals_of_counts, strict=True)}
        ratio_sum, ratio_square_sum, count = packed[2 * len(names) :]
        ratio_mean = ratio_sum / max(count, 1.0)
        means["val/ratio"] = ratio_mean
        means["val/ratio_var"] = max(ratio_square_sum / max(count, 1.0) - ratio_mean**2, 0.0)
        return means


def ppo_update(
    rollout: Rollout,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    optimisation: Optimisation,
    config: PPOConfig,
    generator: torch.Generator,
    total: Callable[[torch.Tensor], torch.Tensor] = local,
) -> dict[str, float]:
    """Optimise the clipped PPO objective on one rollout batch; returns the diagnostics averaged over every
    micro-batch (of every rank, through ``total``)."""
    stats = StatsAccumulator()
    # Gradient checkpointing recomputes only in training mode; dropout was zeroed at load, so both modes compute the
    # same function. Generation needs eval mode back afterwards (checkpointing would turn its KV cache off).
    for model in (optimisation.policy, optimisation.value_model):
        model.train(config.gradient_checkpointing)
    try:
        _optimise(rollout, advantages, returns, optimisation, config, generator, stats)
    finally:
        optimisation.policy.eval()
        optimisation.value_model.eval()
    return stats.summary(total)


def _optimise(rollout: Rollout, advantages: torch.Tensor, returns: torch.Tensor, optimisation: Optimisation,
              config: PPOConfig, generator: torch.Generator, stats: StatsAccumulator) -> None:
    """Epochs x shuffled mini-batches x accumulated micro-batches, one optimizer step per mini-batch."""
    batch_size = rollout.responses.shape[0]
    mini_batch, micro_batch = config.local_mini_batch_size, config.per_device_train_batch_size
    micro_batches_per_step = mini_batch // micro_batch
    for _epoch in range(config.num_ppo_epochs):
        order = torch.randperm(batch_size, generator=generator).to(rollout.responses.device)
        for mini_start in range(0, batch_size, mini_batch):
            mini_indices = order[mini_start : mini_start + mini_batch]
            for micro_start in range(0, len(mini_indices), micro_batch):
                micro_indices = mini_indices[micro_start : micro_start + micro_batch]
                last = micro_start + micro_batch >= len(mini_indices)
                # Several processes average their gradients once per optimizer step, not once per micro-batch.
                with _gradient_sync(optimisation, last):
                    loss = _micro_batch_loss(rollout, advantages, returns, micro_indices, optimisation, config,
                                             stats)
                    optimisation.accelerator.backward(loss / micro_batches_per_step)
            _optimizer_step(optimisation, config.max_grad_norm)


def _gradient_sync(optimisation: Optimisation, sync: bool) -> contextlib.AbstractContextManager[object]:
    """Both networks' gradient all-reduce on (``sync``) or deferred to a later micro-batch."""
    if sync:
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    for model in (optimisation.policy, optimisation.value_model):
        stack.enter_context(optimisation.accelerator.no_sync(model))
    return stack


def _micro_batch_loss(
    rollout: Rollout,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    rows: torch.Tensor,
    optimisation: Optimisation,
    config: PPOConfig,
    stats: StatsAccumulator,
) -> torch.Tensor:
    queries, query_mask = rollout.queries[rows], rollout.query_mask[rows]
    responses, mask = rollout.responses[rows], rollout.response_mask[rows]
    logits = response_logits(optimisation.policy, queries, query_mask, responses, mask)
    log_distribution = torch.log_softmax(logits.float() / config.temperature, dim=-1)
    logprobs = torch.gather(log_distribution, -1, responses.unsqueeze(-1)).squeeze(-1)
    # Without an entropy bonus the entropy is only a diagnostic: keep it out of the graph.
    with torch.set_grad_enabled(config.entropy_coef != 0 and torch.is_grad_enabled()):
        entropy = masked_mean(entropy_from_log_probs(log_distribution), mask)
    values = response_values(optimisation.value_model, queries, query_mask, responses, mask)

    policy_out = clipped_policy_loss(logprobs, rollout.logprobs[rows], advantages[rows], mask, config.cliprange)
    value_loss, value_clipfrac = clipped_value_loss(
        values, rollout.values[rows], returns[rows], mask, config.cliprange_value
    )
    stats.add("policy/approxkl_avg", policy_out.approxkl)
    stats.add("policy/clipfrac_avg", policy_out.clipfrac)
    stats.add("loss/policy_avg", policy_out.loss)
    stats.add("loss/value_avg", value_loss)
    stats.add("val/clipfrac_avg", value_clipfrac)
    stats.add("policy/entropy_avg", entropy)
    stats.add_ratios(policy_out.ratio, mask)
    return policy_out.loss - config.entropy_coef * entropy + config.vf_coef * value_loss


def _optimizer_step(optimisation: Optimisation, max_grad_norm: float) -> None:
    accelerator = optimisation.accelerator
    if max_grad_norm > 0:
        accelerator.clip_grad_norm_(optimisation.policy.parameters(), max_grad_norm)
        accelerator.clip_grad_norm_(optimisation.value_model.parameters(), max_grad_norm)
    optimisation.policy_optimizer.step()
    optimisation.value_optimizer.step()
    optimisation.policy_optimizer.zero_grad(set_to_none=True)
    optimisation.value_optimizer.zero_grad(set_to_none=True)
