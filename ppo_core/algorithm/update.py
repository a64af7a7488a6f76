"""The PPO update: epochs x shuffled mini-batches x micro-batches with gradient accumulation.

The policy's clipped loss always; the value network's clipped loss with GAE; a KL loss term when KL is not in the
reward (GRPO's placement).
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import torch
from accelerate import Accelerator
from transformers import PreTrainedModel

from ppo_core.algorithm.losses import StepTotals, clipped_value_loss
from ppo_core.algorithm.masked import local
from ppo_core.algorithm.objective import policy_objective
from ppo_core.algorithm.token_head import select_head
from ppo_core.config.ppo_config import PPOConfig
from ppo_core.metric_names import KL_LOSS
from ppo_core.models.attention_kernel import attention_dtype, ratio_attention
from ppo_core.models.loading import ValueModel
from ppo_core.rollout.collect import Rollout, response_values, scoring_logits, update_shares_prompts


@dataclass
class Optimisation:
    """The trained networks and their optimizers; the policy and value are separate, with separate rates. A
    critic-free estimator has no value network (and no optimizer for one)."""

    accelerator: Accelerator
    policy: PreTrainedModel
    value_model: ValueModel | None
    policy_optimizer: torch.optim.Optimizer
    value_optimizer: torch.optim.Optimizer | None

    @property
    def models(self) -> list[torch.nn.Module]:
        return [self.policy] + ([self.value_model] if self.value_model is not None else [])

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.policy_optimizer] + ([self.value_optimizer] if self.value_optimizer is not None else [])


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


@dataclass(frozen=True)
class UpdateTargets:
    """What the update fits: the advantages, GAE's value targets (None without a value network), and the KL loss
    term's coefficient beta (None when KL is in the reward instead)."""

    advantages: torch.Tensor  # [B, R]
    returns: torch.Tensor | None  # [B, R]
    kl_loss_coef: float | None  # the config's beta as the controller holds it (verl's name, kl_loss_coef)


def ppo_update(
    rollout: Rollout,
    targets: UpdateTargets,
    optimisation: Optimisation,
    config: PPOConfig,
    generator: torch.Generator,
    total: Callable[[torch.Tensor], torch.Tensor] = local,
    max_length: int | None = None,
) -> dict[str, float]:
    """Optimise the clipped PPO objective on one rollout batch; returns the diagnostics averaged over every
    micro-batch (of every rank, through ``total``). ``max_length`` is seq_mean_token_sum_norm's constant divisor
    (the response length; default the batch's width)."""
    stats = StatsAccumulator()
    # Gradient checkpointing recomputes only in training mode; dropout was zeroed at load, so both modes compute the
    # same function. Generation needs eval mode back afterwards (checkpointing would turn its KV cache off).
    for model in optimisation.models:
        model.train(config.gradient_checkpointing)
    try:
        _optimise(rollout, targets, optimisation, config, generator, stats,
                  max_length or rollout.responses.shape[1], total)
        rollout.logprobs_pending = False  # one epoch over every row has written them
    finally:
        for model in optimisation.models:
            model.eval()
    return stats.summary(total)


def _optimise(rollout: Rollout, targets: UpdateTargets, optimisation: Optimisation, config: PPOConfig,
              generator: torch.Generator, stats: StatsAccumulator, max_length: int,
              total: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Epochs x shuffled mini-batches x accumulated micro-batches, one optimizer step per mini-batch; each
    micro-batch's share of the step's loss is computed on its own rows, and ``forward_groups`` of them share one
    forward and one backward (the same gradient: the gradient of a sum is the sum of the gradients)."""
    batch_size = rollout.responses.shape[0]
    mini_batch, micro_batch = config.local_mini_batch_size, config.per_device_train_batch_size
    group = forward_group(config)
    # The rollout's attention kernel, so the first ratio divides like by like; the backward too, where gradient
    # checkpointing runs the forward again.
    device = rollout.responses.device
    dtype = attention_dtype(optimisation.policy, device, optimisation.accelerator.mixed_precision)
    tokens = rollout.queries.shape[1] + max_length
    for _epoch in range(config.num_ppo_epochs):
        order = torch.randperm(batch_size, generator=generator).to(rollout.responses.device)
        for mini_start in range(0, batch_size, mini_batch):
            mini_indices = order[mini_start : mini_start + mini_batch]
            step = step_totals(rollout.response_mask[mini_indices], micro_batch, optimisation.accelerator.num_processes,
                               total)
            micro_batches = [mini_indices[start : start + micro_batch]
                             for start in range(0, len(mini_indices), micro_batch)]
            for first in range(0, len(micro_batches), group):
                last = first + group >= len(micro_batches)
                # Several processes average their gradients once per optimizer step, not once per micro-batch.
                with _gradient_sync(optimisation, last), ratio_attention(dtype, device, tokens):
                    loss = _group_loss(rollout, targets, micro_batches[first : first + group], optimisation, config,
                                       stats, max_length, step)
                    optimisation.accelerator.backward(loss)
            _optimizer_step(optimisation, config.max_grad_norm)


def forward_group(config: PPOConfig) -> int:
    """Micro-batches per update forward: ``update_forward_batch_size`` rows (None: one micro-batch, each forward on
    its own) over ``per_device_train_batch_size``, at least 1."""
    rows = config.update_forward_batch_size
    return 1 if rows is None else max(1, rows // config.per_device_train_batch_size)


def step_totals(step_mask: torch.Tensor, micro_batch: int, processes: int,
                total: Callable[[torch.Tensor], torch.Tensor] = local) -> StepTotals:
    """The valid tokens and responses of one optimizer step over every process (``total`` sums over them), from
    this process's rows of it; one reduction per step."""
    counts = total(torch.stack([step_mask.sum().float(), torch.tensor(float(step_mask.shape[0]),
                                                                      device=step_mask.device)]))
    tokens, rows = counts.cpu().tolist()
    return StepTotals(tokens=tokens, rows=rows, micro_batches=-(-step_mask.shape[0] // micro_batch),
                      processes=processes)


def _gradient_sync(optimisation: Optimisation, sync: bool) -> contextlib.AbstractContextManager[object]:
    """Both networks' gradient all-reduce on (``sync``) or deferred to a later micro-batch."""
    if sync:
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    for model in optimisation.models:
        stack.enter_context(optimisation.accelerator.no_sync(model))
    return stack


def _group_loss(
    rollout: Rollout,
    targets: UpdateTargets,
    micro_batches: list[torch.Tensor],
    optimisation: Optimisation,
    config: PPOConfig,
    stats: StatsAccumulator,
    max_length: int,
    step: StepTotals,
) -> torch.Tensor:
    """The summed step-loss shares of ``micro_batches``, from one forward of each network over all their rows; each
    micro-batch's loss and statistics come from its own rows, as if it had run alone."""
    rows = torch.cat(micro_batches)
    queries, query_mask = rollout.queries[rows], rollout.query_mask[rows]
    responses, mask = rollout.responses[rows], rollout.response_mask[rows]
    # Rows of one prompt (a GRPO group) run its tokens once where prompts are long enough, the gradient flowing back
    # through the copies of its KV cache.
    shared = update_shares_prompts(config, queries.shape[1], max_length)
    logits = scoring_logits(optimisation.policy, shared, queries, query_mask, responses, mask)
    values = None
    if optimisation.value_model is not None and targets.returns is not None and rollout.values is not None:
        values = response_values(optimisation.value_model, queries, query_mask, responses, mask)
    loss = torch.zeros((), device=logits.device)
    start = 0
    for micro in micro_batches:
        part = slice(start, start + len(micro))
        loss = loss + _micro_batch_loss(rollout, targets, micro, logits[part], None if values is None else values[part],
                                        config, stats, max_length, step)
        start += len(micro)
    return loss


def _micro_batch_loss(
    rollout: Rollout,
    targets: UpdateTargets,
    rows: torch.Tensor,
    logits: torch.Tensor,
    values: torch.Tensor | None,
    config: PPOConfig,
    stats: StatsAccumulator,
    max_length: int,
    step: StepTotals,
) -> torch.Tensor:
    """One micro-batch's share of the step's loss, from the policy's logits (and the value network's values) of its
    ``rows``; its statistics go to ``stats``."""
    responses, mask = rollout.responses[rows], rollout.response_mask[rows]
    # Without an entropy bonus the entropy is only a diagnostic: it stays out of the graph.
    head = select_head(config.fused_logits_head, logits.device)
    logprobs, entropy = head(logits, responses, config.temperature, config.entropy_coef != 0)

    if rollout.logprobs_pending:  # this forward is the policy the rows were sampled from: old = new
        rollout.logprobs[rows] = logprobs.detach().to(rollout.logprobs.dtype)
    objective = policy_objective(logprobs, rollout.logprobs[rows], rollout.ref_logprobs[rows],
                                 targets.advantages[rows], mask, entropy, config, targets.kl_loss_coef, step,
                                 max_length)
    # A share times the step's micro-batches, averaged over them (and ranks), is the step's loss.
    shares = step.micro_batches
    policy_out = objective.policy
    stats.add("policy/approxkl_avg", policy_out.approxkl)
    stats.add("policy/clipfrac_avg", policy_out.clipfrac)
    stats.add("clip_ratio/low", policy_out.clip_low)
    stats.add("clip_ratio/high", policy_out.clip_high)
    stats.add("loss/policy_avg", policy_out.loss * shares)
    stats.add("policy/entropy_avg", objective.entropy)
    stats.add_ratios(policy_out.ratio, mask)
    if objective.kl is not None:
        stats.add(KL_LOSS, objective.kl * shares)
    loss = objective.loss
    if values is not None and targets.returns is not None and rollout.values is not None:
        value_loss, value_clipfrac = clipped_value_loss(
            values, rollout.values[rows], targets.returns[rows], mask, config.cliprange_value, step, config.loss_type
        )
        stats.add("loss/value_avg", value_loss * shares)
        stats.add("val/clipfrac_avg", value_clipfrac)
        loss = loss + config.vf_coef * value_loss
    return loss


def _optimizer_step(optimisation: Optimisation, max_grad_norm: float) -> None:
    accelerator = optimisation.accelerator
    if max_grad_norm > 0:
        for model in optimisation.models:  # each network's norm on its own, as with two separate trainers
            accelerator.clip_grad_norm_(model.parameters(), max_grad_norm)
    for optimizer in optimisation.optimizers:
        optimizer.step()
    for optimizer in optimisation.optimizers:
        optimizer.zero_grad(set_to_none=True)
